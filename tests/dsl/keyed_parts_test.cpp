// A keyed throttle with a large table (max_keys >= 65,536) on a context of several threads splits
// it in parts by key hash (16 at 65,536, 128 at 1,000,000), each with its own lock and an index
// sized for its share, so that threads deciding for different keys rarely meet or wait for a
// growing index. What a user relies on must not change: at most max_keys keys are tracked (the
// parts draw room from one budget, a few dozen keys at a time), a key in debt is never forgotten,
// keys beyond the table wait in the one overflow bucket in arrival order, the counters count every
// decision once, and nothing is refused. Virtual time (the gate told it will run on two threads,
// as a context of two would tell it), except the two-thread cases at the end (which measure no
// time).
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <numeric>
#include <rc/rc.hpp>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"

namespace keyed_parts_test {

using namespace std::chrono_literals;

namespace {

constexpr std::size_t big = 65'536;
// Room a part may hold and not use when the budget runs out: under a block per part.
constexpr std::size_t stranded = 16 * 31;

std::vector<int> iota_values(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

std::string key_of(const rc::exchange& ex) { return "user-" + std::to_string(ex.body<int>()); }

const rc::keyed_gate* gate_of(const rc::route_definition& def) {
  return dynamic_cast<const rc::keyed_gate*>(def.gates.at(0).get());
}

// Adds the route to the context (of two threads), runs it to the end, stops, and returns the
// snapshot taken once it had drained.
rc::context_snapshot run_to_end(rc::context& ctx, rc::route_definition def) {
  ctx.add(std::move(def));
  ctx.start();
  ctx.drain();
  rc::context_snapshot s = ctx.snapshot();
  ctx.stop();
  return s;
}

// The route-scope gate, told that two threads will run it: what a context of two threads does
// when the route joins it.
const rc::keyed_gate* split_gate(rc::route_definition& def) {
  auto* w = dynamic_cast<rc::wrapper*>(def.gates.at(0).get());
  REQUIRE(w != nullptr);
  w->attach(2);
  return dynamic_cast<const rc::keyed_gate*>(w);
}

}  // namespace

TEST_CASE(
    "on two threads a keyed throttle splits its table from max_keys 65,536, and keeps one on one thread, smaller, "
    "unkeyed or with max_queue") {
  const auto parts = [](rc::throttle_options o, unsigned threads = 2) {
    auto def = rc::craft().id("t").throttle(std::move(o)).from(rc::simple(std::vector<int>{})).to(rc::noop()).build();
    dynamic_cast<rc::wrapper*>(def.gates.at(0).get())->attach(threads);
    return gate_of(def)->stats().parts;
  };
  CHECK(parts({.rate = 10, .key = key_of, .max_keys = big}) == 16);
  CHECK(parts({.rate = 10, .key = key_of, .max_keys = 1'000'000}) == 128);   // a part per 4,096 keys and more
  CHECK(parts({.rate = 10, .key = key_of, .max_keys = 1'000'000}, 1) == 1);  // one thread: one table is faster
  CHECK(parts({.rate = 10, .key = key_of, .max_keys = big - 1}) == 1);
  CHECK(parts({.rate = 10, .max_keys = big}) == 1);  // unkeyed: one state
  // max_queue bounds the whole gate's queue: one count, under one lock.
  CHECK(parts({.rate = 10, .key = key_of, .max_keys = big, .max_queue = 5}) == 1);
  auto slow = rc::craft()
                  .id("s")
                  .slow_down({.window = 1s, .key = key_of, .max_keys = big})
                  .from(rc::simple(std::vector<int>{}))
                  .to(rc::noop())
                  .build();
  dynamic_cast<rc::wrapper*>(slow.gates.at(0).get())->attach(2);
  CHECK(gate_of(slow)->stats().parts == 1);  // its overflow sketch is shared by every key
}

TEST_CASE("a split table sizes each part's index for its share of max_keys at the split, with filters from 1,000,000") {
  // No index of a part is rebuilt (under its lock, with another thread waiting for it) before the
  // part holds its share and an eighth more. At 65,536 keys: 16 parts of 8,192 entries (4 bytes
  // each), 512 KiB in all, which the caches hold: no filter. At 1,000,000: 128 parts of 16,384
  // entries, 8 MiB in all as one table's index would be, each with its filter (4 bits per entry).
  const auto split_at = [](std::size_t max_keys) {
    auto def = rc::craft()
                   .id("t")
                   .throttle({.rate = 10, .key = key_of, .max_keys = max_keys})
                   .from(rc::simple(std::vector<int>{}))
                   .to(rc::noop())
                   .build();
    return split_gate(def)->stats();
  };
  const rc::keyed_gate_stats small = split_at(big);
  CHECK(small.parts == 16);
  CHECK(small.keys == 0);
  CHECK(small.memory_bytes == 16 * 8'192 * 4);
  const rc::keyed_gate_stats large = split_at(1'000'000);
  CHECK(large.parts == 128);
  CHECK(large.memory_bytes == 128 * (16'384 * 4 + 16'384 / 2));
}

TEST_CASE("a split table tracks at most max_keys keys, and the keys beyond wait in the overflow in arrival order") {
  rc::context ctx(rc::virtual_time);
  constexpr int n = static_cast<int>(big) + 3'000;
  std::vector<int> order;
  std::atomic<int> overflowed{0}, rejected{0};
  auto s1 = ctx.on("route:throttle:overflow", [&](const rc::event&) { ++overflowed; });
  auto s2 = ctx.on("route:throttle:rejected", [&](const rc::event&) { ++rejected; });
  // All at once; a key's bucket (burst 1, 1,000/s) is not full again for 1 ms, so no entry is
  // evictable at the instant they arrive: every key past the budget goes to the overflow bucket,
  // which admits one per millisecond.
  auto def = rc::craft()
                 .id("split")
                 .throttle({.rate = 1000, .burst = 1, .key = key_of, .max_keys = big})
                 .from(rc::simple(iota_values(n)))
                 .process([&](rc::exchange& ex) { order.push_back(ex.body<int>()); })
                 .build();
  const rc::keyed_gate* gate = split_gate(def);
  ctx.add(std::move(def));
  ctx.start();
  ctx.drain();
  const rc::keyed_gate_stats st = gate->stats();
  const rc::context_snapshot snap = ctx.snapshot();
  REQUIRE(st.parts == 16);
  CHECK(st.keys <= big);
  CHECK(st.keys >= big - stranded);
  CHECK(rejected.load() == 0);
  REQUIRE(order.size() == static_cast<std::size_t>(n));  // every exchange delivered, once
  CHECK(static_cast<std::size_t>(overflowed.load()) == n - st.keys);
  // The table's keys and the overflow's first pass at once; the other overflowed ones, after the
  // first millisecond, in arrival order.
  std::vector<int> late(order.begin() + static_cast<std::ptrdiff_t>(st.keys + 1), order.end());
  CHECK(std::is_sorted(late.begin(), late.end()));
  // The counters of the 16 parts add up: every exchange passed once, the overflowed ones (all
  // but the first of them, which took the overflow's one token) after a wait.
  REQUIRE(snap.routes.size() == 1);
  REQUIRE(snap.routes[0].gates.size() == 1);
  const rc::gate_snapshot& g = snap.routes[0].gates[0];
  CHECK(g.passed == static_cast<std::uint64_t>(n));
  CHECK(g.rejected == 0);
  CHECK(g.delayed == n - st.keys - 1);
  CHECK(g.waits.count == static_cast<std::uint64_t>(n));
}

TEST_CASE("a split table evicts idle keys from their own part: 200,000 keys through max_keys 65,536 all pass at once") {
  rc::context ctx(rc::virtual_time);
  std::atomic<int> delayed{0}, overflowed{0};
  auto s1 = ctx.on("route:throttle:delayed", [&](const rc::event&) { ++delayed; });
  auto s2 = ctx.on("route:throttle:overflow", [&](const rc::event&) { ++overflowed; });
  std::uint64_t delivered = 0;
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr std::uint64_t keys = 100'000;
#else
  constexpr std::uint64_t keys = 200'000;
#endif
  // One new key a microsecond; a bucket is full again (idle) 1 ms after its token, and a part's
  // least recently used entry is tens of milliseconds old once the table is full.
  auto def = rc::craft()
                 .id("evict")
                 .throttle({.rate = 1000,
                            .burst = 1,
                            .key = [](const rc::exchange& ex) { return std::to_string(ex.body<std::uint64_t>()); },
                            .max_keys = big})
                 .from(rc::test::paced_counter(keys, 1us))
                 .to([&](std::uint64_t&) { ++delivered; })
                 .build();
  const rc::keyed_gate* gate = split_gate(def);
  ctx.add(std::move(def));
  ctx.start();
  ctx.drain();
  CHECK(delivered == keys);
  CHECK(delayed.load() == 0);
  CHECK(overflowed.load() == 0);
  CHECK(gate->stats().keys <= big);
  CHECK(gate->stats().keys >= big - stranded);
}

TEST_CASE("a split table never forgets a key in debt: its next exchange waits for its own bucket") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  // Key "user-0" takes its one token at 0 and is in debt for 1 s. More keys than the table holds
  // arrive at 1 ms (idle from 1.001 s; those beyond it overflow). At 500 ms user-0 comes again:
  // it must still have its bucket, and wait until 1 s, not start afresh (at once) or overflow.
  std::vector<std::pair<rc::duration, int>> plan{{0ms, 0}};
  for (int i = 1; i <= static_cast<int>(big) + 100; ++i) plan.emplace_back(1ms, i);
  plan.emplace_back(500ms, 0);
  auto def = rc::craft()
                 .id("debt")
                 .throttle({.rate = 1, .burst = 1, .key = key_of, .max_keys = big})
                 .from(rc::test::arrivals_source<int>(std::move(plan)))
                 .to(out)
                 .build();
  REQUIRE(split_gate(def)->stats().parts == 16);
  ctx.add(std::move(def));
  ctx.start();
  ctx.drain();
  const auto bodies = out.bodies();
  const auto times = rc::test::in_ms(out.times());
  const auto second = std::find(bodies.begin() + 1, bodies.end(), 0);
  REQUIRE(second != bodies.end());
  CHECK(times[static_cast<std::size_t>(second - bodies.begin())] == 1000.0);
}

TEST_CASE("with 2 threads, a keyed reject-mode throttle on a split table admits exactly its burst per key") {
  // 20,000 keys, 5 exchanges each, burst 2, one token an hour: 40,000 admitted whichever thread
  // decides, and the parts' counters add up to every decision once.
  constexpr int keys = 20'000;
  constexpr int n = keys * 5;
  rc::context ctx(rc::context_options{.threads = 2});
  std::atomic<int> admitted{0}, refused{0};
  auto def = rc::craft()
                 .id("split-reject")
                 .error([&](const rc::error& e, rc::exchange&) -> rc::recovery {
                   if (e.code() == rc::errc::rate_limited) refused.fetch_add(1);
                   return rc::recovery::drop();
                 })
                 .throttle({.rate = 1,
                            .per = rc::per::hour,
                            .mode = rc::throttle_mode::reject,
                            .burst = 2,
                            .key = [](const rc::exchange& ex) { return std::to_string(ex.body<int>() % keys); },
                            .max_keys = 100'000})
                 .from(rc::simple(iota_values(n)))
                 .process([&](rc::exchange&) { admitted.fetch_add(1); })
                 .build();
  const rc::keyed_gate* gate = gate_of(def);
  const rc::context_snapshot s = run_to_end(ctx, std::move(def));
  CHECK(gate->stats().parts == 16);
  CHECK(gate->stats().keys == static_cast<std::size_t>(keys));
  CHECK(admitted.load() == keys * 2);
  CHECK(refused.load() == n - keys * 2);
  REQUIRE(s.routes.at(0).gates.size() == 1);
  CHECK(s.routes[0].gates[0].passed == static_cast<std::uint64_t>(keys * 2));
  CHECK(s.routes[0].gates[0].rejected == static_cast<std::uint64_t>(n - keys * 2));
}

namespace {

// n distinct keys through a keyed throttle of max_keys (rate 10,000/s, burst 1: a bucket is idle
// again 100 us after its token), all started at once on a context of two threads: a new key finds
// an evictable entry in its part or, while none is, waits in the overflow bucket. Which of the two
// happens depends on timing; that every exchange runs exactly once, unrefused, and is counted
// once does not, nor that at most max_keys keys are held. The table splits into `parts`, which
// take memory_at_split bytes before the first key.
void each_runs_once_on_two_threads(std::size_t max_keys, int n, std::size_t parts, std::size_t memory_at_split) {
  rc::context ctx(rc::context_options{.threads = 2});
  std::atomic<int> delivered{0}, failed{0};
  auto sub = ctx.on("route:exchange:failed", [&](const rc::event&) { ++failed; });
  auto def = rc::craft()
                 .id("split-many")
                 .throttle({.rate = 10'000, .burst = 1, .key = key_of, .max_keys = max_keys})
                 .from(rc::simple(iota_values(n)))
                 .process([&](rc::exchange&) { delivered.fetch_add(1); })
                 .build();
  const rc::keyed_gate* gate = split_gate(def);
  CHECK(gate->stats().parts == parts);
  CHECK(gate->stats().memory_bytes == memory_at_split);
  const rc::context_snapshot s = run_to_end(ctx, std::move(def));
  CHECK(delivered.load() == n);
  CHECK(failed.load() == 0);
  CHECK(gate->stats().keys <= max_keys);
  REQUIRE(s.routes.at(0).gates.size() == 1);
  CHECK(s.routes[0].gates[0].passed == static_cast<std::uint64_t>(n));
  CHECK(s.routes[0].gates[0].rejected == 0);
}

}  // namespace

TEST_CASE("with 2 threads, keys beyond a split table evict idle ones or wait in the overflow, and each runs once") {
  // 16 parts, each index of 8,192 entries and no filter.
  each_runs_once_on_two_threads(big, static_cast<int>(big) + 2'000, 16, 16 * 8'192 * 4);
}

TEST_CASE("with 2 threads, a split table with filters in its parts runs each of 200,000 keys once through 131,072") {
  // From max_keys 131,072 the parts' indexes (32 of 8,192 entries) add up to 2^18 entries: each
  // part has its filter (4 bits an entry), and a new key's index entry waits among the part's
  // pending ones. The parts evict through their filters, refilling them.
  each_runs_once_on_two_threads(131'072, 200'000, 32, 32 * (8'192 * 4 + 8'192 / 2));
}

}  // namespace keyed_parts_test
