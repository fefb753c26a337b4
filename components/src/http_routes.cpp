#include "http_routes.hpp"

#include <algorithm>

#include "http_internal.hpp"

namespace rc::http_detail {

path_pattern path_pattern::parse(std::string_view path) {
  path_pattern p;
  path = strip_trailing_slash(path);
  if (path.size() >= 2 && path.substr(path.size() - 2) == "/*") {
    p.wildcard = true;
    path = path.substr(0, path.size() - 2);
    if (path.empty()) path = "/";
  }
  for_each_segment(path, [&](std::string_view s) {
    if (!s.empty() && s.front() == ':') {
      p.segments.push_back({std::string(s.substr(1)), true});
      ++p.params;
    } else {
      p.segments.push_back({std::string(s), false});
      ++p.literals;
    }
    return true;
  });
  if (!p.wildcard && p.params == 0) {
    p.literal_only = true;
    p.literal += '/';  // (empty until now; an assignment of "/" trips a false -Wrestrict in GCC 12)
    for (std::size_t i = 0; i < p.segments.size(); ++i) {
      if (i > 0) p.literal += '/';
      p.literal += p.segments[i].text;
    }
  }
  return p;
}

bool path_pattern::walk(std::string_view path, http_headers* captured) const {
  std::size_t i = 0;         // segments matched so far
  std::size_t consumed = 0;  // characters of `path` they cover
  bool overflow = false;     // the path has segments left when the pattern has none
  const std::string_view stripped = strip_trailing_slash(path);
  const bool ok = for_each_segment(path, [&](std::string_view s) {
    if (i == segments.size()) {
      overflow = true;
      return false;
    }
    const auto& seg = segments[i];
    if (seg.param) {
      if (s.empty()) return false;
      if (captured) captured->emplace_back(seg.text, percent_decode(s, false));
    } else if (s != seg.text) {
      return false;
    }
    ++i;
    consumed = static_cast<std::size_t>(s.data() + s.size() - stripped.data());
    return true;
  });
  if (ok) {
    if (i != segments.size()) return false;
    if (wildcard && captured) captured->emplace_back("*", "");
    return true;
  }
  if (!wildcard || !overflow) return false;
  // The pattern is exhausted and the path goes on: the wildcard takes the rest.
  std::string_view rest = stripped.substr(std::min(consumed, stripped.size()));
  if (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
  if (captured) captured->emplace_back("*", percent_decode(rest, false));
  return true;
}

void route_index::rebuild(const std::vector<const path_pattern*>& patterns) {
  literal_.clear();
  root_ = node{};
  depth_ = 0;
  for (std::uint32_t i = 0; i < patterns.size(); ++i) {
    const path_pattern& p = *patterns[i];
    if (p.literal_only) {
      literal_[p.literal].push_back(i);
      continue;
    }
    node* n = &root_;
    for (const auto& seg : p.segments) {
      std::unique_ptr<node>& child = seg.param ? n->param : n->literal[seg.text];
      if (!child) child = std::make_unique<node>();
      n = child.get();
    }
    (p.wildcard ? n->wildcards : n->ends).push_back(i);
    depth_ = std::max(depth_, p.segments.size());
  }
}

void route_index::rebuild(const std::vector<path_pattern>& patterns) {
  std::vector<const path_pattern*> view;
  view.reserve(patterns.size());
  for (const auto& p : patterns) view.push_back(&p);
  rebuild(view);
}

bool route_index::candidates(std::string_view path, std::vector<std::uint32_t>& out) const {
  // A literal-only pattern reads a path starting with '/' as one text (match()'s shortcut); any
  // other path it walks, as every pattern does: such paths are left to the caller's full scan.
  if (path.empty() || path.front() != '/') return false;
  out.clear();
  if (const auto it = literal_.find(strip_trailing_slash(path)); it != literal_.end()) out = it->second;
  // The path's segments as walk() reads them, one more than the deepest pattern at most: a path
  // with more than that can only match a wildcard, and how many more does not matter.
  thread_local std::vector<std::string_view> segments;
  segments.clear();
  for_each_segment(path, [&](std::string_view s) {
    segments.push_back(s);
    return segments.size() <= depth_;
  });
  collect(root_, 0, segments, out);
  if (out.size() > 1) std::sort(out.begin(), out.end());  // the tree's are in the order it met them
  return true;
}

void route_index::collect(const node& n, std::size_t depth, const std::vector<std::string_view>& segments,
                          std::vector<std::uint32_t>& out) const {
  // A wildcard takes whatever follows its segments, none included.
  out.insert(out.end(), n.wildcards.begin(), n.wildcards.end());
  if (depth == segments.size()) {
    out.insert(out.end(), n.ends.begin(), n.ends.end());
    return;
  }
  const std::string_view s = segments[depth];
  if (const auto it = n.literal.find(s); it != n.literal.end()) collect(*it->second, depth + 1, segments, out);
  if (n.param && !s.empty()) collect(*n.param, depth + 1, segments, out);
}

}  // namespace rc::http_detail
