// Fuzz target: the HTTP server's route index (components/src/http_routes.hpp), which sees every
// request's path once a server has eight routes or more. Input: route patterns, one per line, then
// an empty line, then request paths, one per line (without patterns before the empty line, the
// lines are both). Every route whose pattern matches a path must be among the index's candidates
// for it, named once, in ascending order, whatever the bytes.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_harness.hpp"
#include "http_routes.hpp"

namespace rc::fuzz {

void http_routes(std::string_view input) {
  std::vector<std::string_view> patterns;
  std::vector<std::string_view> paths;
  bool after_blank = false;
  while (!input.empty()) {
    const auto nl = input.find('\n');
    const std::string_view line = input.substr(0, nl);
    input = nl == std::string_view::npos ? std::string_view{} : input.substr(nl + 1);
    if (line.empty() && !after_blank) {
      after_blank = true;
      continue;
    }
    (after_blank ? paths : patterns).push_back(line);
  }
  if (!after_blank) paths = patterns;
  if (patterns.size() > 256) patterns.resize(256);  // a server's routes, not a request's bytes

  std::vector<http_detail::path_pattern> parsed;
  for (const auto p : patterns) parsed.push_back(http_detail::path_pattern::parse(p));
  http_detail::route_index index;
  index.rebuild(parsed);

  std::vector<std::uint32_t> candidates;
  for (const auto path : paths) {
    if (!index.candidates(path, candidates)) {
      if (!path.empty() && path.front() == '/') throw finding("a path starting with '/' was not narrowed");
      continue;
    }
    if (!std::is_sorted(candidates.begin(), candidates.end()) ||
        std::adjacent_find(candidates.begin(), candidates.end()) != candidates.end())
      throw finding("candidates out of order or repeated");
    for (std::uint32_t i = 0; i < parsed.size(); ++i) {
      if (parsed[i].match(path, nullptr) && !std::binary_search(candidates.begin(), candidates.end(), i))
        throw finding("a matching route is not a candidate");
    }
  }
}

}  // namespace rc::fuzz
