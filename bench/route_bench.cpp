// route-bench: what finding a request's route costs an HTTP server with N routes, trying each
// route's pattern in turn against asking the route index (components/src/http_routes.hpp) first
// and trying only the routes it names. The table is a REST API's: per resource a collection, an
// item, an item's sub-collection and a static tree ("/api/v1/r7", "/api/v1/r7/:id",
// "/api/v1/r7/:id/parts", "/static/r7/*"); the paths asked for cycle through all four kinds.
//
//   build/bench/route-bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "http_routes.hpp"

namespace {

using rc::http_detail::path_pattern;
using rc::http_detail::route_index;

struct api {
  std::vector<path_pattern> patterns;
  std::vector<std::string> paths;
  route_index index;

  explicit api(int routes) {
    for (int r = 0; r * 4 < routes; ++r) {
      const std::string base = "/api/v1/r" + std::to_string(r);
      patterns.push_back(path_pattern::parse(base));
      patterns.push_back(path_pattern::parse(base + "/:id"));
      patterns.push_back(path_pattern::parse(base + "/:id/parts"));
      patterns.push_back(path_pattern::parse("/static/r" + std::to_string(r) + "/*"));
      paths.push_back(base);
      paths.push_back(base + "/42");
      paths.push_back(base + "/42/parts");
      paths.push_back("/static/r" + std::to_string(r) + "/css/site.css");
    }
    index.rebuild(patterns);
  }
};

void linear(benchmark::State& state) {
  const api a(static_cast<int>(state.range(0)));
  std::size_t next = 0;
  for (auto _ : state) {
    const std::string& path = a.paths[next++ % a.paths.size()];
    std::size_t matched = 0;
    for (const auto& p : a.patterns) matched += p.match(path, nullptr) ? 1 : 0;
    benchmark::DoNotOptimize(matched);
  }
}

void indexed(benchmark::State& state) {
  const api a(static_cast<int>(state.range(0)));
  std::vector<std::uint32_t> candidates;
  std::size_t next = 0;
  for (auto _ : state) {
    const std::string& path = a.paths[next++ % a.paths.size()];
    std::size_t matched = 0;
    a.index.candidates(path, candidates);
    for (const std::uint32_t i : candidates) matched += a.patterns[i].match(path, nullptr) ? 1 : 0;
    benchmark::DoNotOptimize(matched);
  }
}

BENCHMARK(linear)->Arg(8)->Arg(64)->Arg(512);
BENCHMARK(indexed)->Arg(8)->Arg(64)->Arg(512);

}  // namespace

BENCHMARK_MAIN();
