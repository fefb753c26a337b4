// detail::tsc_clock, the counter clock behind context_options::tsc_clock: the discipline that
// keeps its line on the kernel's clock (made-up counters, exact), then the clock itself against
// steady_clock on this machine (real time, a few tens of ms; skipped where the counter is not
// used, which the last case checks the context for).
#include "rc/tsc_clock.hpp"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "rc/context.hpp"

namespace tsc_clock_test {

using rc::detail::counter_line;
using rc::detail::counter_sample;
using rc::detail::next_counter_line;

namespace {

constexpr std::int64_t interval = 4'000'000;       // the clock's own: 4 ms
constexpr std::uint64_t third = (1ULL << 32) / 3;  // 1/3 ns a tick (a 3 GHz counter), 32.32

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// A line on a 3 GHz counter through (c0, ns0), due 4 ms on.
counter_line line_at(std::uint64_t c0, std::int64_t ns0) { return {c0, ns0, third, c0 + 12'000'000}; }

}  // namespace

TEST_CASE("tsc_clock: the first line starts on the kernel's clock, at the rate measured from the base") {
  counter_sample base{1'000'000, 10'000};
  const counter_sample s{1'750'000, 260'000};  // 750,000 ticks in 250 us: 3 GHz
  const counter_line l = next_counter_line({base.counter, base.ns, 0, 0}, base, s, interval);
  CHECK(l.c0 == s.counter);
  CHECK(l.ns0 == s.ns);
  CHECK(l.rate == third);
  CHECK(l.due == s.counter + 12'000'000);        // 4 ms at 3 GHz
  CHECK(l.at(s.counter + 3'000) == s.ns + 999);  // 1 us on, less the rate's rounding
  CHECK(l.at(s.counter - 10) == s.ns);           // a counter read before the anchor reads the anchor
  CHECK(base.counter == 1'000'000);              // the base kept
}

TEST_CASE("tsc_clock: a line behind the kernel's clock steps forward onto it") {
  counter_sample base{0, 0};
  const counter_line old = line_at(0, 0);
  // 4 ms on by the counter, the kernel 4 ms and 300 ns on: the line reads 300 ns behind.
  const counter_sample s{12'000'000, 4'000'300};
  REQUIRE(old.at(s.counter) < s.ns);
  const counter_line l = next_counter_line(old, base, s, interval);
  CHECK(l.ns0 == s.ns);
  CHECK(l.rate == static_cast<std::uint64_t>((static_cast<rc::detail::uint128>(s.ns) << 32) / s.counter));
  CHECK(l.rate > third);  // the measured rate: the kernel ran faster than the old line
}

TEST_CASE("tsc_clock: a line ahead of the kernel's clock is held and slowed to meet it at the next anchor") {
  counter_sample base{0, 0};
  const counter_line old = line_at(0, 0);
  // The kernel only 4 ms less 400 ns on: the line reads 400 ns ahead, and must not step back.
  const counter_sample s{12'000'000, 3'999'600};
  const std::int64_t handed = old.at(s.counter - 1);  // what a reader just before the anchor got
  const counter_line l = next_counter_line(old, base, s, interval);
  CHECK(l.ns0 == old.at(s.counter));
  CHECK(l.ns0 >= handed);
  const double measured = std::ldexp(static_cast<double>(s.ns) / static_cast<double>(s.counter), 32);
  const double ahead = static_cast<double>(l.ns0 - s.ns);
  CHECK(ahead == Approx(400).margin(1));  // the rate's rounding
  CHECK(static_cast<double>(l.rate) == Approx(measured * (1.0 - ahead / interval)).epsilon(1e-9));
  // If the kernel keeps the measured rate, the line meets it at its due, 4 ms on by the kernel.
  const auto kernel_at = [&](std::uint64_t c) {
    return s.ns + std::llround(static_cast<double>(c - s.counter) * std::ldexp(measured, -32));
  };
  CHECK(std::abs(l.at(l.due) - kernel_at(l.due)) <= 4);  // within the rounding of the ticks
  CHECK(l.due > s.counter);
}

TEST_CASE("tsc_clock: a line far ahead is slowed by at most 0.5%") {
  counter_sample base{0, 0};
  const counter_sample s{12'000'000, 3'000'000};  // the line 1 ms ahead
  const counter_line l = next_counter_line(line_at(0, 0), base, s, interval);
  CHECK(l.ns0 == line_at(0, 0).at(s.counter));  // 4 ms, less the rate's rounding
  const double measured = std::ldexp(3'000'000.0 / 12'000'000.0, 32);
  CHECK(static_cast<double>(l.rate) == Approx(measured * (1.0 - rc::detail::max_counter_slew)).epsilon(1e-9));
}

TEST_CASE("tsc_clock: a line is held only to what it can have read, its value at its due") {
  counter_sample base{0, 0};
  const counter_line old = line_at(0, 0);  // due at 12,000,000 (4 ms)
  // Nobody read the clock for a second; the counter ran 1% fast against the kernel meanwhile.
  const counter_sample s{3'030'000'000, 1'000'000'000};
  REQUIRE(old.at(s.counter) > s.ns);  // the old line, carried on, would be 10 ms ahead
  REQUIRE(old.at(old.due) < s.ns);    // but it was read up to its due only
  const counter_line l = next_counter_line(old, base, s, interval);
  CHECK(l.ns0 == s.ns);  // so the new line starts on the kernel's clock, not 10 ms ahead
}

TEST_CASE("tsc_clock: a counter that went back starts a new base, the line not stepping back") {
  counter_sample base{5'000'000'000, 2'000'000'000};
  const counter_line old = line_at(6'000'000'000, 2'333'333'333);
  SECTION("before the line's anchor, the kernel's clock ahead") {
    const counter_sample s{1'000, 2'400'000'000};  // a counter reset (a machine resumed)
    const counter_line l = next_counter_line(old, base, s, interval);
    CHECK(base.counter == s.counter);
    CHECK(base.ns == s.ns);
    CHECK(l.c0 == s.counter);
    CHECK(l.ns0 == s.ns);
    CHECK(l.rate == old.rate);
    CHECK(l.due == s.counter + 12'000'000);
  }
  SECTION("the kernel's clock behind the old anchor") {
    const counter_sample s{1'000, 2'000'000'000};
    const counter_line l = next_counter_line(old, base, s, interval);
    CHECK(l.ns0 == old.ns0);  // held
  }
}

TEST_CASE(
    "tsc_clock: modelled for ten seconds against a drifting kernel clock, readings never go back and "
    "stay within a microsecond of it") {
  // A 2.9 GHz counter; the kernel's clock runs at 1 + drift against it, the drift wandering
  // within +-50 ppm (NTP's corrections), and each sample's kernel reading off by up to 30 ns.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> jitter(-30.0, 30.0);
  std::uniform_int_distribution<std::uint64_t> gap(30'000, 900'000);  // 10-300 us between readings
  const double ns_per_tick = 1.0 / 2.9;
  double drift = 0;
  double kernel = 1e9;  // ns
  std::uint64_t counter = 1'000'000'000;
  const auto sample = [&] {
    return counter_sample{counter, static_cast<std::int64_t>(std::llround(kernel + jitter(rng)))};
  };

  counter_sample base = sample();
  counter += 725'000;  // the clock's first calibration: 250 us
  kernel += 725'000 * ns_per_tick;
  counter_line line = next_counter_line({base.counter, base.ns, 0, 0}, base, sample(), interval);
  std::int64_t last = line.ns0;
  double worst_behind = 0, worst_ahead = 0;
  std::uint64_t readings = 0, anchors = 1, backwards = 0;
  while (kernel < 11e9) {
    const std::uint64_t ticks = gap(rng);
    counter += ticks;
    kernel += static_cast<double>(ticks) * ns_per_tick * (1 + drift);
    drift = std::clamp(drift + std::uniform_real_distribution<double>(-2e-7, 2e-7)(rng), -50e-6, 50e-6);
    std::int64_t t;
    if (counter >= line.due) {  // the reader that re-anchors
      line = next_counter_line(line, base, sample(), interval);
      ++anchors;
      t = line.ns0;
    } else {
      t = line.at(counter);
    }
    if (t < last) ++backwards;
    last = std::max(last, t);
    worst_behind = std::max(worst_behind, kernel - static_cast<double>(t));
    worst_ahead = std::max(worst_ahead, static_cast<double>(t) - kernel);
    ++readings;
  }
  INFO("readings " << readings << ", anchors " << anchors << ", behind " << worst_behind << " ns, ahead " << worst_ahead
                   << " ns");
  CHECK(backwards == 0);   // not even before the per-thread clamp
  CHECK(anchors > 2'000);  // one each 4 ms, or a little more
  CHECK(worst_behind < 1'000);
  CHECK(worst_ahead < 1'000);
}

TEST_CASE(
    "tsc_clock: on this machine, the clock reads steady_clock's time and its readings never go back, on two "
    "threads at once") {
  if (!rc::detail::tsc_clock::usable()) {
    WARN("the time-stamp counter is not the kernel's clocksource here: the engine reads steady_clock");
    return;
  }
  auto& clock = rc::detail::tsc_clock::instance();
  const std::uint64_t anchors_before = clock.anchors();
  std::atomic<int> ready{0};
  struct result {
    std::uint64_t reads = 0, backwards = 0, outside = 0;
    std::int64_t worst = 0;
  };
  const auto run = [&](result& r) {
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
    std::int64_t last = INT64_MIN;
    const std::int64_t end = steady_ns() + 30'000'000;  // 30 ms: several anchors
    for (;;) {
      const std::int64_t before = steady_ns();
      const std::int64_t t = clock.now_ns();
      const std::int64_t after = steady_ns();
      ++r.reads;
      if (t < last) ++r.backwards;
      last = t;
      // A microsecond of slack either side: the line's error between anchors is far smaller.
      const std::int64_t off = t < before ? before - t : (t > after ? t - after : 0);
      if (off > 1'000) ++r.outside;
      r.worst = std::max(r.worst, off);
      if (after > end) break;
    }
  };
  result a, b;
  std::thread other([&] { run(b); });
  run(a);
  other.join();
  for (const result* r : {&a, &b}) {
    INFO("reads " << r->reads << ", worst " << r->worst << " ns outside steady_clock's bracket");
    CHECK(r->reads > 1'000);
    CHECK(r->backwards == 0);
    CHECK(r->outside == 0);
  }
  CHECK(clock.anchors() >= anchors_before + 5);  // 30 ms: re-anchored every 4 ms
  const counter_line l = clock.line();
  CHECK(l.rate > 0);
  CHECK(l.due > l.c0);
}

TEST_CASE("tsc_clock: a real-time context reads the engine clock on steady_clock's time line, counter or not") {
  for (const bool counter : {true, false}) {
    rc::context ctx(rc::context_options{.tsc_clock = counter});
    // Engine time is steady_clock's since the context was made: both advance alike. Each engine
    // reading is bracketed by two of steady_clock's (the thread may be held up between them).
    const std::int64_t before0 = steady_ns();
    const std::int64_t e0 = ctx.now().time_since_epoch().count();
    const std::int64_t after0 = steady_ns();
    while (steady_ns() - after0 < 10'000'000) {
    }
    const std::int64_t before1 = steady_ns();
    const std::int64_t e1 = ctx.now().time_since_epoch().count();
    const std::int64_t after1 = steady_ns();
    INFO("counter clock " << counter << " (usable: " << rc::detail::tsc_clock::usable() << ")");
    CHECK(e1 - e0 <= after1 - before0 + 1'000);
    CHECK(e1 - e0 >= before1 - after0 - 1'000);  // 10 ms at least
  }
}

}  // namespace tsc_clock_test
