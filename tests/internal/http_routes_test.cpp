// The HTTP server's route index (components/src/http_routes.hpp): for any table of patterns and
// any path, the routes it names include every route whose pattern matches, in the server's order,
// so that a server with many routes picks the same route as one that tries them all.
#include "http_routes.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

namespace http_routes_test {

namespace {

using rc::http_detail::path_pattern;
using rc::http_detail::route_index;

struct table {
  std::vector<path_pattern> patterns;
  route_index index;

  explicit table(const std::vector<std::string>& paths) {
    for (const auto& p : paths) patterns.push_back(path_pattern::parse(p));
    index.rebuild(patterns);
  }

  std::vector<std::uint32_t> matching(std::string_view path) const {
    std::vector<std::uint32_t> out;
    for (std::uint32_t i = 0; i < patterns.size(); ++i)
      if (patterns[i].match(path, nullptr)) out.push_back(i);
    return out;
  }

  std::vector<std::uint32_t> candidates(std::string_view path) const {
    std::vector<std::uint32_t> out{999};  // stale contents must go
    REQUIRE(index.candidates(path, out));
    return out;
  }
};

// Every matching route is a candidate; candidates are ascending and named once.
void check_covers(const table& t, std::string_view path) {
  INFO("path \"" << path << "\"");
  const auto c = t.candidates(path);
  CHECK(std::is_sorted(c.begin(), c.end()));
  CHECK(std::adjacent_find(c.begin(), c.end()) == c.end());
  for (const std::uint32_t i : t.matching(path)) {
    INFO("route " << i);
    CHECK(std::binary_search(c.begin(), c.end(), i));
  }
}

}  // namespace

TEST_CASE("http routes: the index names a route for each kind of pattern that matches") {
  const table t(
      {"/items", "/items/:id", "/items/new", "/items/:id/parts", "/files/*", "/*", "/", "/items/:id/*", "/:any/new"});
  CHECK(t.candidates("/items/new") == std::vector<std::uint32_t>{1, 2, 5, 7, 8});
  CHECK(t.candidates("/items/7/parts/") == std::vector<std::uint32_t>{3, 5, 7});
  CHECK(t.candidates("/items/7/parts/x") == std::vector<std::uint32_t>{5, 7});  // deeper than any pattern
  CHECK(t.candidates("/files") == std::vector<std::uint32_t>{4, 5});            // a wildcard takes nothing too
  CHECK(t.candidates("/files/a/b/c") == std::vector<std::uint32_t>{4, 5});
  CHECK(t.candidates("/") == std::vector<std::uint32_t>{5, 6});
  CHECK(t.candidates("/items//parts") == std::vector<std::uint32_t>{5});  // a parameter takes no empty segment
  for (std::string_view path :
       {"/items/new", "/items/7/parts/", "/items/7/parts/x", "/files", "/files/a/b/c", "/", "/items//parts", "/x"})
    check_covers(t, path);
}

TEST_CASE("http routes: a path that does not start with '/' is left to a scan of every route") {
  const table t({"/a", "/a/:b"});
  std::vector<std::uint32_t> out{7};
  CHECK_FALSE(t.index.candidates("a/b", out));
  CHECK_FALSE(t.index.candidates("", out));
  CHECK(out == std::vector<std::uint32_t>{7});
}

TEST_CASE("http routes: with a thousand literal routes a path's candidates are the one route of its text") {
  std::vector<std::string> paths(1001, "/api/v1/");
  for (int i = 0; i < 1000; ++i) paths[i] += "resource" + std::to_string(i);
  paths[1000] += ":name/:id";
  const table t(paths);
  CHECK(t.candidates("/api/v1/resource417") == std::vector<std::uint32_t>{417});
  CHECK(t.candidates("/api/v1/resource417/") == std::vector<std::uint32_t>{417});
  CHECK(t.candidates("/api/v1/resource417/9") == std::vector<std::uint32_t>{1000});
  CHECK(t.candidates("/api/v2/resource417").empty());
}

TEST_CASE("http routes: random tables and paths: every matching route is a candidate") {
  // Segments that collide often: literals, an empty one (from "//"), parameters.
  const std::vector<std::string> pieces = {"a", "b", "ab", "", ":p", ":q"};
  std::mt19937 rng(20261207);
  const auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  for (int round = 0; round < 200; ++round) {
    std::vector<std::string> paths;
    const std::size_t routes = 1 + pick(40);
    for (std::size_t r = 0; r < routes; ++r) {
      std::string p;
      const std::size_t depth = pick(5);
      for (std::size_t d = 0; d < depth; ++d) {
        p += '/';
        p += pieces[pick(pieces.size())];
      }
      if (pick(4) == 0) p += "/*";
      if (p.empty()) p += '/';
      if (pick(5) == 0) p += "/";
      paths.push_back(p);
    }
    const table t(paths);
    for (int q = 0; q < 50; ++q) {
      std::string path;
      const std::size_t depth = pick(7);
      for (std::size_t d = 0; d < depth; ++d) {
        const std::string& piece = pieces[pick(pieces.size())];
        path += '/';
        path += !piece.empty() && piece.front() == ':' ? std::string_view("v") : std::string_view(piece);
      }
      if (path.empty() || pick(4) == 0) path += "/";
      check_covers(t, path);
    }
  }
}

}  // namespace http_routes_test
