// split / aggregate through the DSL, in virtual time: children are exchanges of their own, run
// concurrently up to `parallelism`, failed or dropped children are missing from the aggregate,
// and the parent keeps its identity.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <numeric>
#include <ranges>
#include <rc/rc.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"

namespace split_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;
using rc::test::in_ms;
using rc::test::rc_error;

namespace {

using ints = std::vector<int>;

struct order {
  std::string id;
  std::vector<std::string> lines;
};

// Counts live instances: proves the children are made lazily, not all at once.
struct tracked {
  static inline std::atomic<int> live{0};
  int value = 0;
  explicit tracked(int v) : value(v) { ++live; }
  tracked(const tracked& o) : value(o.value) { ++live; }
  tracked(tracked&& o) noexcept : value(o.value) { ++live; }
  tracked& operator=(const tracked&) = default;
  tracked& operator=(tracked&&) noexcept = default;
  ~tracked() { --live; }
};

}  // namespace

TEST_CASE("split(f) runs the steps per element and aggregate() gathers them in split order") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::vector<std::string>> out;
  ctx.add(rc::craft()
              .id("s")
              .from(rc::simple(order{"o1", {"a", "bb", "ccc"}}))
              .split([](const order& o) { return o.lines; })
              .transform([](std::string line) { return line + "!"; })
              .aggregate()
              .to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(out.count() == 1);
  CHECK(out.bodies()[0] == std::vector<std::string>{"a!", "bb!", "ccc!"});
}

TEST_CASE("split() on a range body splits per element, aggregate(f) folds the children into a new body type") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  ctx.add(rc::craft()
              .id("s")
              .from(rc::simple(std::vector<ints>{{1, 2, 3}, {10}}))
              .split()
              .transform([](int x) { return x * 2; })
              .aggregate([](ints&& v) { return std::to_string(std::accumulate(v.begin(), v.end(), 0)); })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<std::string>{"12", "20"});
}

TEST_CASE("each child is an exchange of its own: fresh id, parent's correlation and headers, hierarchy, events") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<int> children;
  rc::spy<ints> out;
  ctx.add(rc::craft()
              .id("s")
              .from(rc::simple(ints{7}))
              .header("tenant", "acme")
              .transform([](int n) { return ints(static_cast<std::size_t>(n), n); })
              .split({.parallelism = 4})
              .to(children)
              .header("child-only", true)
              .aggregate()
              .to(out));
  ctx.start();
  ctx.drain();

  const auto started = events.named("route:exchange:started");
  const auto completed = events.named("route:exchange:completed");
  REQUIRE(started.size() == 8);  // the parent and its 7 children
  REQUIRE(completed.size() == 8);
  const std::string parent_id = started[0].details["exchangeId"];
  const std::string correlation = started[0].details["correlationId"];
  std::set<std::string> ids;
  for (const auto& e : started) {
    ids.insert(e.details["exchangeId"].get<std::string>());
    CHECK(e.details["correlationId"] == correlation);
  }
  CHECK(ids.size() == 8);  // fresh ids

  REQUIRE(children.count() == 7);
  for (const auto& r : children.received()) {
    CHECK(r.exchange_id != parent_id);
    REQUIRE(r.headers.find("tenant") != nullptr);
    CHECK(*r.headers.find("tenant") == "acme");
    REQUIRE(r.headers.find("routecraft.split_hierarchy") != nullptr);
    CHECK(*r.headers.find("routecraft.split_hierarchy") == nlohmann::json::array({parent_id}));
  }

  // The parent goes on with its own identity and headers, after every child has completed.
  REQUIRE(out.count() == 1);
  const auto parent = out.received()[0];
  CHECK(parent.exchange_id == parent_id);
  CHECK(parent.body == ints(7, 7));
  CHECK(parent.headers.find("tenant") != nullptr);
  CHECK(parent.headers.find("child-only") == nullptr);
  CHECK(parent.headers.find("routecraft.split_hierarchy") == nullptr);
  CHECK(completed.back().details["exchangeId"] == parent_id);
}

TEST_CASE("children run concurrently up to parallelism: 10 children of 100 ms, parallelism 3, end at 400 ms") {
  rc::context ctx(rc::virtual_time);
  rc::spy<ints> out;
  rc::spy<int> child_done;
  int in_flight = 0;
  int max_in_flight = 0;
  ctx.add(rc::craft()
              .id("s")
              .from(rc::simple(std::vector<ints>{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}))
              .split({.parallelism = 3})
              .process([&](rc::exchange&) { max_in_flight = std::max(max_in_flight, ++in_flight); })
              .delay(100ms)
              .process([&](rc::exchange&) { --in_flight; })
              .to(child_done)
              .aggregate()
              .to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(out.count() == 1);
  CHECK(out.bodies()[0] == ints{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(in_ms(out.times()) == std::vector<double>{400});
  CHECK(in_ms(child_done.times()) == std::vector<double>{100, 100, 100, 200, 200, 200, 300, 300, 300, 400});
  CHECK(max_in_flight == 3);
}

TEST_CASE("a failed or dropped child is missing from the aggregate and reported as its own, the parent goes on") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<ints> out;
  ctx.add(rc::craft()
              .id("s")
              .from(rc::simple(std::vector<ints>{{1, 2, 3, 4, 5}}))
              .split({.parallelism = 2})
              .delay(10ms)
              .filter([](const int& x) { return x != 2; })
              .transform([](int x) {
                if (x == 4) throw std::runtime_error("line 4 is broken");
                return x;
              })
              .aggregate()
              .to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(out.count() == 1);
  CHECK(out.bodies()[0] == ints{1, 3, 5});
  REQUIRE(events.count("route:exchange:dropped") == 1);
  CHECK(events.named("route:exchange:dropped")[0].details["reason"] == "filtered");
  REQUIRE(events.count("route:exchange:failed") == 1);
  const auto failed = events.named("route:exchange:failed")[0].details;
  CHECK(failed["error"]["code"] == "RC5001");
  CHECK(events.count("route:exchange:completed") == 4);  // 3 children and the parent
  CHECK(events.named("route:exchange:completed").back().details["exchangeId"] != failed["exchangeId"]);
}

TEST_CASE("when every child fails, the default aggregate fails the parent with RC5002, aggregate(f) gets none") {
  auto throwing = [](int x) -> int { throw std::runtime_error("bad " + std::to_string(x)); };
  SECTION("default aggregator") {
    rc::context ctx(rc::virtual_time);
    event_recorder events(ctx, "route:exchange:failed");
    rc::spy<ints> out;
    ctx.add(rc::craft()
                .id("s")
                .from(rc::simple(std::vector<ints>{{1, 2}}))
                .split()
                .transform(throwing)
                .aggregate()
                .to(out));
    ctx.start();
    ctx.drain();
    CHECK(out.count() == 0);
    REQUIRE(events.count("route:exchange:failed") == 3);
    CHECK(events.all()[2].details["error"]["code"] == "RC5002");
  }
  SECTION("aggregate(f)") {
    rc::context ctx(rc::virtual_time);
    rc::spy<std::size_t> out;
    ctx.add(rc::craft()
                .id("s")
                .from(rc::simple(std::vector<ints>{{1, 2}}))
                .split()
                .transform(throwing)
                .aggregate([](ints&& v) { return v.size(); })
                .to(out));
    ctx.start();
    ctx.drain();
    CHECK(out.bodies() == std::vector<std::size_t>{0});
  }
}

TEST_CASE("split without aggregate: the children run to the end of the route, the parent completes after them") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:completed");
  rc::spy<int> out;
  ctx.add(
      rc::craft().id("s").from(rc::simple(std::vector<ints>{{1, 2, 3}})).split({.parallelism = 3}).delay(50ms).to(out));
  ctx.start();
  ctx.drain();  // waits for the children
  CHECK(out.bodies() == ints{1, 2, 3});
  CHECK(in_ms(out.times()) == std::vector<double>{50, 50, 50});
  const auto completed = events.all();
  REQUIRE(completed.size() == 4);
  CHECK(completed[3].details["exchange"]["body"] == nlohmann::json::array({1, 2, 3}));  // the parent, unchanged
  CHECK(rc::test::in_ms({completed[3].at.time_since_epoch()}) == std::vector<double>{50});
}

TEST_CASE("nested splits, each closed by its own aggregate") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::vector<int>> out;
  rc::spy<int> leaves;
  ctx.add(rc::craft()
              .id("s")
              .from(rc::simple(std::vector<std::vector<ints>>{{{1, 2}, {3}, {4, 5, 6}}}))
              .split({.parallelism = 2})
              .split({.parallelism = 2})
              .delay(10ms)
              .to(leaves)
              .transform([](int x) { return x * x; })
              .aggregate([](ints&& v) { return std::accumulate(v.begin(), v.end(), 0); })
              .aggregate()
              .to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(out.count() == 1);
  CHECK(out.bodies()[0] == ints{5, 9, 77});
  // The leaves carry both group ids, outermost first.
  REQUIRE(leaves.count() == 6);
  for (const auto& r : leaves.received()) CHECK(r.headers.find("routecraft.split_hierarchy")->size() == 2);
}

TEST_CASE("a split of 100,000 elements keeps at most `parallelism` children alive") {
  tracked::live = 0;
  rc::context ctx(rc::virtual_time);
  rc::spy<long long> out;
  int in_flight = 0;
  int max_in_flight = 0;
  int max_live = 0;
  ctx.add(rc::craft()
              .id("big")
              .from(rc::simple(100000))
              .split(
                  [](const int& n) {
                    return std::views::iota(0, n) | std::views::transform([](int i) { return tracked(i); });
                  },
                  {.parallelism = 16})
              .process([&](rc::exchange&) {
                max_in_flight = std::max(max_in_flight, ++in_flight);
                max_live = std::max(max_live, tracked::live.load());
              })
              .delay(1ms)
              .process([&](rc::exchange&) { --in_flight; })
              .transform([](tracked t) { return static_cast<long long>(t.value); })
              .aggregate([](std::vector<long long>&& v) { return std::accumulate(v.begin(), v.end(), 0LL); })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<long long>{4999950000LL});
  CHECK(max_in_flight == 16);
  CHECK(max_live <= 17);  // the children's bodies (and one being made), never the whole range
  CHECK(tracked::live == 0);
  CHECK(in_ms(out.times()) == std::vector<double>{6250});  // 100,000 / 16 rounds of 1 ms
}

TEST_CASE("synchronous children run one after another inside the split, with their events") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<ints> out;
  ctx.add(rc::craft()
              .id("s")
              .from(rc::simple(std::vector<ints>{{1, 2}}))
              .split({.parallelism = 8})
              .transform([](int x) { return x + 1; })
              .aggregate()
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<ints>{{2, 3}});
  CHECK(events.names("route:exchange:") ==
        std::vector<std::string>{"route:exchange:started", "route:exchange:started", "route:exchange:completed",
                                 "route:exchange:started", "route:exchange:completed", "route:exchange:completed"});
}

TEST_CASE("step-scope wrappers apply inside a split, and a route-scope retry re-runs the whole split") {
  rc::context ctx(rc::virtual_time);
  rc::spy<ints> out;
  int attempts = 0;
  int parent_runs = 0;
  ctx.add(rc::craft()
              .id("s")
              .retry({.max_attempts = 2, .backoff = 0ms})
              .from(rc::simple(std::vector<ints>{{1, 2}}))
              .process([&](rc::exchange&) { ++parent_runs; })
              .split()
              .retry({.max_attempts = 3, .backoff = 0ms})
              .transform([&](int x) {
                if (++attempts == 1) throw std::runtime_error("first attempt fails");
                return x;
              })
              .aggregate()
              .transform([&](const ints& v) {  // by reference: the retry re-runs on the same body
                if (parent_runs == 1) throw std::runtime_error("parent fails once");
                return v;
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<ints>{{1, 2}});
  CHECK(parent_runs == 2);
  CHECK(attempts == 5);  // 3 on the first run (one retried), 2 on the second
}

TEST_CASE("split options and wrappers around split/aggregate are checked when the route is built") {
  auto base = [] { return rc::craft().id("s").from(rc::simple(std::vector<ints>{{1}})); };
  CHECK_THROWS_MATCHES(base().split({.parallelism = 0}), rc::error,
                       rc_error(rc::errc::misconfigured, "split({ parallelism }) must be at least 1, got 0."));
  CHECK_THROWS_MATCHES(base().retry().split(), rc::error,
                       rc_error(rc::errc::misconfigured, "split() cannot be wrapped by retry()"));
  CHECK_THROWS_MATCHES(base().split().timeout(10ms).aggregate(), rc::error,
                       rc_error(rc::errc::misconfigured, "aggregate() cannot be wrapped by timeout()"));
  CHECK_THROWS_MATCHES(
      rc::craft().id("s").cache().from(rc::simple(std::vector<ints>{{1}})).split().to(rc::log()).build(), rc::error,
      rc_error(rc::errc::misconfigured, "cache() needs every split() closed"));
}

TEST_CASE("on a real-time context with two threads, concurrent children all arrive, in split order") {
  rc::context ctx(rc::context_options{.threads = 2});
  rc::spy<std::vector<long long>> out;
  std::vector<ints> parents(20);
  for (int p = 0; p < 20; ++p)
    for (int i = 0; i < 50; ++i) parents[static_cast<std::size_t>(p)].push_back(p * 100 + i);
  ctx.add(rc::craft()
              .id("mt")
              .from(rc::simple(parents))
              .split({.parallelism = 8})
              .delay(0ms)  // each child waits once, and may resume on the other thread
              .transform([](int x) { return static_cast<long long>(x); })
              .aggregate()
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK_FALSE(ctx.stop().forced);
  REQUIRE(out.count() == 20);
  for (const auto& body : out.bodies()) {
    REQUIRE(body.size() == 50);
    CHECK(std::is_sorted(body.begin(), body.end()));
    CHECK(body.back() - body.front() == 49);
  }
}

TEST_CASE("a route-scope timeout covers the whole split: its deadline reaches the children") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:failed");
  rc::spy<ints> out;
  rc::spy<int> children;
  ctx.add(rc::craft()
              .id("s")
              .timeout(150ms)
              .from(rc::simple(std::vector<ints>{{1, 2, 3}}))
              .split()
              .delay(100ms)
              .to(children)
              .aggregate()
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.count() == 0);
  CHECK(children.bodies() == ints{1});  // the second child's wait was cut at the deadline
  const auto failed = events.all();
  REQUIRE_FALSE(failed.empty());
  CHECK(failed.back().details["error"]["code"] == "RC5011");  // the parent
  CHECK(in_ms({failed.back().at.time_since_epoch()}) == std::vector<double>{150});
}

}  // namespace split_test
