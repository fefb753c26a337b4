// Several threads in real time: simple() shares its values out in batches (spawn_batch), and
// what a user relies on still holds: every exchange runs once, drain() waits for all of them,
// route:stopped follows the last one, and a keyed throttle's limits are exact whichever thread
// decides. Nothing here measures time.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstddef>
#include <mutex>
#include <numeric>
#include <rc/rc.hpp>
#include <string>
#include <vector>

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
                         .key = [](const rc::exchange& ex) { return "k" + std::to_string(ex.body<int>() % 10); }})
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
