// The HTTP server's path patterns ("/items/:id", "/files/*") and the index that finds, for a
// request's path, the few routes whose pattern may match it, so that a server with hundreds of
// routes does not try each one per request.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rc/http.hpp"

namespace rc::http_detail {

inline std::string_view strip_trailing_slash(std::string_view p) {
  if (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
  return p;
}

// Calls f(segment) for each segment of "/a/b/c"; stops early when f returns false.
template <class F>
bool for_each_segment(std::string_view path, F f) {
  path = strip_trailing_slash(path);
  if (path == "/") return true;
  std::size_t start = 1;
  while (start <= path.size()) {
    auto slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    if (!f(path.substr(start, slash - start))) return false;
    start = slash + 1;
  }
  return true;
}

struct path_pattern {
  struct segment {
    std::string text;
    bool param = false;
  };
  std::vector<segment> segments;
  bool wildcard = false;
  int literals = 0;
  int params = 0;
  bool literal_only = false;  // no parameter, no wildcard: `literal` is the whole pattern
  std::string literal;        // "/" followed by the segments joined with '/'

  static path_pattern parse(std::string_view path);

  [[gnu::always_inline]] bool match(std::string_view path, http_headers* captured) const {
    // A pattern of literal segments only matches exactly its own text (a trailing slash aside):
    // one comparison, inline where the server tries each route, instead of a walk over the
    // segments. Paths not starting with '/' take the walk, which reads them its own way.
    if (literal_only && !path.empty() && path.front() == '/') return strip_trailing_slash(path) == literal;
    return walk(path, captured);
  }

 private:
  bool walk(std::string_view path, http_headers* captured) const;
};

/// The routes (numbered in the order the server tries them) whose pattern may match a path: a
/// pattern of literal segments only is looked up by its whole text, the others in a tree of their
/// segments (a literal segment's child found by its text, a parameter's child taken for any
/// non-empty segment, wildcards kept where their segments end). Rebuilt whenever the routes
/// change; read-only meanwhile.
class route_index {
 public:
  /// Indexes patterns[i] as route number i.
  void rebuild(const std::vector<const path_pattern*>& patterns);
  /// The same for a table that holds its patterns by value.
  void rebuild(const std::vector<path_pattern>& patterns);

  /// Fills `out` with the numbers of the routes whose pattern may match `path`, ascending: each
  /// one whose match(path) is true, and possibly others (the caller still tries each). False,
  /// leaving `out` as it was, for a path that does not start with '/' (read the way match()'s
  /// walk reads it): then every route is a candidate.
  bool candidates(std::string_view path, std::vector<std::uint32_t>& out) const;

 private:
  struct text_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  template <class T>
  using by_text = std::unordered_map<std::string, T, text_hash, std::equal_to<>>;

  struct node {
    by_text<std::unique_ptr<node>> literal;  // children by a literal segment's text
    std::unique_ptr<node> param;             // the child for a parameter segment
    std::vector<std::uint32_t> ends;         // patterns without a wildcard whose segments end here
    std::vector<std::uint32_t> wildcards;    // patterns whose segments end here, then a wildcard
  };

  void collect(const node& n, std::size_t depth, const std::vector<std::string_view>& segments,
               std::vector<std::uint32_t>& out) const;

  by_text<std::vector<std::uint32_t>> literal_;  // literal-only patterns by their whole text
  node root_;                                    // the other patterns
  std::size_t depth_ = 0;                        // the most segments of a pattern in the tree
};

}  // namespace rc::http_detail
