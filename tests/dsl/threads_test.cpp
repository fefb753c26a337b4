// Several threads in real time: every thread makes and starts chunks of simple()'s values
// (source_context::spawn_shared), and what a user relies on still holds: every exchange runs
// once with an id of its own, drain() waits for all of them, route:stopped follows the last one,
// stop() ends the source between chunks, the counters (in flight, a gate's passed and rejected)
// are exact, and a keyed throttle's limits are exact whichever thread decides. Nothing here
// measures time.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <numeric>
#include <rc/rc.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace threads_test {

namespace {

std::vector<int> iota_values(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

TEST_CASE("with 2 threads, simple() runs every value exactly once and drain() waits for all") {
  constexpr int n = 20'000;  // several batches, each shared between the threads
  rc::context ctx(rc::context_options{.threads = 2});
  rc::spy<int> out;
  std::atomic<int> completed{0};
  std::atomic<int> completed_at_stopped{-1};
  auto on_completed = ctx.on("route:exchange:completed", [&](const rc::event&) { completed.fetch_add(1); });
  auto on_stopped = ctx.on("route:stopped", [&](const rc::event&) { completed_at_stopped.store(completed.load()); });
  ctx.add(rc::craft().id("shared").from(rc::simple(iota_values(n))).transform([](int v) { return v * 2; }).to(out));
  ctx.start();
  ctx.drain();
  // drain() returned: everything ran, and the route announced its stop after the last exchange.
  CHECK(out.count() == static_cast<std::size_t>(n));
  CHECK(completed.load() == n);
  CHECK(completed_at_stopped.load() == n);
  CHECK(ctx.find_route("shared")->in_flight() == 0);
  ctx.stop();
  std::vector<int> bodies = out.bodies();
  std::sort(bodies.begin(), bodies.end());
  std::vector<int> expected = iota_values(n);
  for (int& v : expected) v *= 2;
  CHECK(bodies == expected);
}

TEST_CASE("with 2 threads, a keyed reject-mode throttle admits exactly its burst per key") {
  // 10 keys, burst 5, one token an hour: exactly 50 pass whatever the interleaving; a race on the
  // per-key table would let more through (or lose a key's state and admit it again).
  constexpr int n = 10'000;
  rc::context ctx(rc::context_options{.threads = 2});
  rc::spy<int> out;
  std::atomic<int> rejected{0};
  ctx.add(rc::craft()
              .id("keyed")
              .error([&](const rc::error&, rc::exchange&) -> rc::recovery {
                rejected.fetch_add(1);
                return rc::recovery::drop();
              })
              .from(rc::simple(iota_values(n)))
              .throttle({.rate = 1,
                         .per = rc::per::hour,
                         .mode = rc::throttle_mode::reject,
                         .burst = 5,
                         .key =
                             [](const rc::exchange& ex) {
                               return std::string("k").append(std::to_string(ex.body<int>() % 10));
                             }})
              .to(out));
  ctx.start();
  ctx.drain();
  ctx.stop();
  CHECK(out.count() == 50);
  CHECK(rejected.load() == n - 50);
  std::vector<int> per_key(10, 0);
  for (int v : out.bodies()) ++per_key[static_cast<std::size_t>(v % 10)];
  CHECK(per_key == std::vector<int>(10, 5));
}

TEST_CASE("with 2 threads, every exchange simple() starts has an id of its own") {
  constexpr int n = 50'000;  // about 50 chunks, taken by both threads
  rc::context ctx(rc::context_options{.threads = 2});
  rc::spy<int> out;
  ctx.add(rc::craft().id("ids").from(rc::simple(iota_values(n))).to(out));
  ctx.start();
  ctx.drain();
  ctx.stop();
  const auto received = out.received();
  REQUIRE(received.size() == static_cast<std::size_t>(n));
  std::set<std::string> ids;
  std::set<int> bodies;
  for (const auto& r : received) {
    ids.insert(r.exchange_id);
    bodies.insert(r.body);
  }
  CHECK(ids.size() == static_cast<std::size_t>(n));  // no id given twice across the threads
  CHECK(bodies.size() == static_cast<std::size_t>(n));
}

TEST_CASE("with 2 threads, a keyed throttle's counters and the route's in flight are exact after drain") {
  // 1,000 keys ("0" to "999"), burst 20, one token an hour: each key admits 20 of its 50 exchanges, whichever
  // thread takes them; the snapshot counts every decision once.
  constexpr int n = 50'000;
  rc::context ctx(rc::context_options{.threads = 2});
  std::atomic<int> admitted{0};
  std::atomic<int> rejected{0};
  ctx.add(rc::craft()
              .id("counted")
              .error([&](const rc::error&, rc::exchange&) -> rc::recovery {
                rejected.fetch_add(1);
                return rc::recovery::drop();
              })
              .from(rc::simple(iota_values(n)))
              .throttle({.rate = 1,
                         .per = rc::per::hour,
                         .mode = rc::throttle_mode::reject,
                         .burst = 20,
                         .key = [](const rc::exchange& ex) { return std::to_string(ex.body<int>() % 1000); }})
              .process([&](rc::exchange&) { admitted.fetch_add(1); }));
  ctx.start();
  ctx.drain();
  const rc::context_snapshot s = ctx.snapshot();
  ctx.stop();
  CHECK(admitted.load() == 1000 * 20);
  CHECK(rejected.load() == n - 1000 * 20);
  REQUIRE(s.routes.size() == 1);
  CHECK(s.routes[0].in_flight == 0);
  REQUIRE(s.routes[0].gates.size() == 1);
  CHECK(s.routes[0].gates[0].passed == 1000u * 20u);
  CHECK(s.routes[0].gates[0].rejected == static_cast<std::uint64_t>(n - 1000 * 20));
  CHECK(s.routes[0].gates[0].waits.count == 1000u * 20u);
}

TEST_CASE("with 2 threads, stop() ends simple() between chunks and no exchange runs twice") {
  // Each exchange takes a little while, so stop() comes while most values are still unmade: the
  // source stops taking chunks, what started finishes, and the rest are never made.
  constexpr int n = 200'000;
  rc::context ctx(rc::context_options{.threads = 2});
  std::mutex mutex;
  std::vector<int> seen;
  std::atomic<int> started{0};
  ctx.add(rc::craft().id("stopped").from(rc::simple(iota_values(n))).process([&](rc::exchange& ex) {
    started.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(2);
    while (std::chrono::steady_clock::now() < until) {
    }
    std::lock_guard lock(mutex);
    seen.push_back(ex.body<int>());
  }));
  ctx.start();
  while (started.load() == 0) std::this_thread::yield();
  const rc::stop_result r = ctx.stop();
  CHECK_FALSE(r.forced);
  CHECK(ctx.find_route("stopped")->in_flight() == 0);
  std::lock_guard lock(mutex);
  CHECK(!seen.empty());
  CHECK(seen.size() < static_cast<std::size_t>(n));  // 200,000 x 2 us: stop() came long before the end
  CHECK(std::set<int>(seen.begin(), seen.end()).size() == seen.size());
}

}  // namespace threads_test
