#include "rc/gates/window_counter.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

namespace window_counter_test {

using namespace std::chrono_literals;

namespace {

constexpr rc::time_point t0{};

// Feeds arrivals to a limiter that admits hit numbers <= limit; returns the admitted times.
template <class Window>
std::vector<rc::time_point> admitted(const std::vector<rc::time_point>& arrivals, std::uint64_t limit,
                                     rc::duration window) {
  Window state;
  std::vector<rc::time_point> passed;
  for (const auto at : arrivals) {
    if (state.increment(at, window).hits <= limit) passed.push_back(at);
  }
  return passed;
}

// The most of `times` that fall in any half-open window (t - window, t].
std::size_t most_in_any_window(const std::vector<rc::time_point>& times, rc::duration window) {
  std::size_t most = 0;
  for (const auto end : times) {
    const auto inside = std::count_if(times.begin(), times.end(), [&](auto t) { return t > end - window && t <= end; });
    most = std::max(most, static_cast<std::size_t>(inside));
  }
  return most;
}

// One request at 0, then one every 100 ms from 500 ms to 1900 ms: a steady stream across the
// edge of a 1 s window opened at 0.
std::vector<rc::time_point> stream_across_an_edge() {
  std::vector<rc::time_point> arrivals{t0};
  for (auto at = 500ms; at <= 1900ms; at += 100ms) arrivals.push_back(t0 + at);
  return arrivals;
}

}  // namespace

TEST_CASE("a fixed window is anchored at the first hit and counts every hit until its end") {
  rc::fixed_window window;
  const auto first = window.increment(t0 + 3s, 10s);
  CHECK(first.hits == 1);
  CHECK(first.reset_at == t0 + 13s);
  CHECK(first.counted_until == t0 + 13s);

  const auto second = window.increment(t0 + 12s, 10s);
  CHECK(second.hits == 2);
  CHECK(second.reset_at == t0 + 13s);  // later hits never move the window
  CHECK(window.hits(t0 + 12999ms) == 2);
}

TEST_CASE("a hit arriving exactly at window_end starts a new fixed window with hits 1") {
  rc::fixed_window window;
  window.increment(t0, 10s);
  window.increment(t0 + 5s, 10s);
  const auto at_edge = window.increment(t0 + 10s, 10s);
  CHECK(at_edge.hits == 1);
  CHECK(at_edge.reset_at == t0 + 20s);
}

TEST_CASE("a fixed window expires lazily: reads see it expired, state changes at the next hit") {
  rc::fixed_window window;
  window.increment(t0, 10s);
  window.increment(t0 + 1s, 10s);
  CHECK_FALSE(window.is_idle(t0 + 9s));
  CHECK(window.is_idle(t0 + 10s));
  CHECK(window.hits(t0 + 30s) == 0);
  CHECK(window.reset_at() == t0 + 10s);  // nothing was swept

  const auto later = window.increment(t0 + 30s, 10s);
  CHECK(later.hits == 1);
  CHECK(later.reset_at == t0 + 40s);
}

TEST_CASE("a zero window makes every hit the first of its own window") {
  rc::fixed_window fixed;
  rc::sliding_window sliding;
  for (int i = 0; i < 3; ++i) {
    CHECK(fixed.increment(t0 + 1s, 0s).hits == 1);
    CHECK(sliding.increment(t0 + 1s, 0s).hits == 1);
  }
  CHECK(sliding.is_idle(t0 + 1s));
}

TEST_CASE("a fixed decrement gives a hit back in its window but never reduces a later window") {
  rc::fixed_window window;
  const auto first = window.increment(t0, 10s);
  window.increment(t0 + 1s, 10s);
  window.decrement(t0 + 2s, first.counted_until);
  CHECK(window.hits(t0 + 2s) == 1);

  const auto old = window.increment(t0 + 3s, 10s);
  const auto fresh = window.increment(t0 + 10s, 10s);
  CHECK(fresh.hits == 1);
  window.decrement(t0 + 11s, old.counted_until);  // old window is over: ignored
  CHECK(window.hits(t0 + 11s) == 1);

  window.decrement(t0 + 12s, fresh.counted_until);
  window.decrement(t0 + 12s, fresh.counted_until);  // never below zero
  CHECK(window.hits(t0 + 12s) == 0);
}

TEST_CASE("fixed retry_at is now below the limit and the window end at or above it") {
  rc::fixed_window window;
  window.increment(t0, 10s);
  CHECK(window.retry_at(t0 + 1s, 2) == t0 + 1s);
  window.increment(t0 + 1s, 10s);
  CHECK(window.retry_at(t0 + 1s, 2) == t0 + 10s);
  CHECK(window.retry_at(t0 + 1s, 0) == rc::time_point::max());
}

TEST_CASE("a fixed window lets a limiter admit nearly twice the limit across a window edge") {
  const auto passed = admitted<rc::fixed_window>(stream_across_an_edge(), 5, 1s);
  // 0, 500..800 ms in the first window, 1000..1400 ms in the second.
  CHECK(passed.size() == 10);
  CHECK(most_in_any_window(passed, 1s) == 9);  // 2 * limit - 1 within (400 ms, 1400 ms]

  // Counting a closed span of one window length, fixed windows reach exactly twice the limit.
  std::vector<rc::time_point> edge{t0};
  for (int i = 0; i < 4; ++i) edge.push_back(t0 + 999ms);
  for (int i = 0; i < 5; ++i) edge.push_back(t0 + 1s);
  CHECK(admitted<rc::fixed_window>(edge, 5, 1s).size() == 10);
}

TEST_CASE("a sliding window never admits more than the limit in any window of a steady stream") {
  const auto passed = admitted<rc::sliding_window>(stream_across_an_edge(), 5, 1s);
  CHECK(most_in_any_window(passed, 1s) == 5);
  // Refused arrivals count too, so a stream twice as fast as the limit stays refused.
  const std::vector<rc::time_point> expected{t0, t0 + 500ms, t0 + 600ms, t0 + 700ms, t0 + 800ms};
  CHECK(passed == expected);

  std::vector<rc::time_point> at_the_limit_rate;
  for (auto at = 0ms; at < 3s; at += 200ms) at_the_limit_rate.push_back(t0 + at);
  CHECK(admitted<rc::sliding_window>(at_the_limit_rate, 5, 1s) == at_the_limit_rate);
}

TEST_CASE("a sliding window counts the arrivals within the preceding window, itself included") {
  rc::sliding_window window;
  CHECK(window.increment(t0, 10s).hits == 1);
  CHECK(window.increment(t0 + 4s, 10s).hits == 2);
  CHECK(window.increment(t0 + 9s, 10s).hits == 3);
  const auto at_edge = window.increment(t0 + 10s, 10s);  // the hit at 0 has just left
  CHECK(at_edge.hits == 3);
  CHECK(at_edge.reset_at == t0 + 14s);
  CHECK(at_edge.counted_until == t0 + 20s);
  CHECK(window.hits(t0 + 13999ms) == 3);
  CHECK(window.hits(t0 + 14s) == 2);
  CHECK(window.hits(t0 + 20s) == 0);
  CHECK(window.is_idle(t0 + 20s));
}

TEST_CASE("sliding reset_at is when the oldest hit leaves and retry_at when enough have left") {
  rc::sliding_window window;
  for (const auto at : {0s, 2s, 4s, 6s}) window.increment(t0 + at, 10s);
  CHECK(window.reset_at(t0 + 7s) == t0 + 10s);
  CHECK(window.retry_at(t0 + 7s, 5) == t0 + 7s);   // 4 counted: a fifth passes now
  CHECK(window.retry_at(t0 + 7s, 4) == t0 + 10s);  // one must leave
  CHECK(window.retry_at(t0 + 7s, 2) == t0 + 14s);  // three must leave
  CHECK(window.retry_at(t0 + 7s, 0) == rc::time_point::max());
  CHECK(window.reset_at(t0 + 30s) == t0 + 30s);  // nothing counts
}

TEST_CASE("a burst larger than the exact ring keeps exact hit numbers") {
  rc::sliding_window window;
  for (std::uint64_t n = 1; n <= 50; ++n) CHECK(window.increment(t0 + 1s, 9s).hits == n);
  CHECK(window.hits(t0 + 9999ms) == 50);
}

TEST_CASE("hits older than the exact ring count at most one bucket width too long") {
  // Window 9 s: buckets of 3 s. Ten hits at 0: the two oldest move to the bucket [9 s, 12 s).
  rc::sliding_window window;
  for (int i = 0; i < 10; ++i) window.increment(t0, 9s);
  CHECK(window.hits(t0 + 8999ms) == 10);
  CHECK(window.hits(t0 + 9s) == 2);  // truly 0: the conservative side
  CHECK(window.reset_at(t0 + 9s) == t0 + 12s);
  CHECK(window.retry_at(t0 + 9s, 1) == t0 + 12s);
  CHECK(window.hits(t0 + 12s) == 0);
  CHECK(window.is_idle(t0 + 12s));
}

TEST_CASE("a sliding decrement gives back its own hit, even after it left the exact ring") {
  rc::sliding_window window;
  const auto oldest = window.increment(t0, 9s);
  for (int i = 1; i < 12; ++i) window.increment(t0 + std::chrono::milliseconds{i}, 9s);
  REQUIRE(window.hits(t0 + 1s) == 12);

  window.decrement(t0 + 1s, oldest.counted_until);  // in a bucket by now
  CHECK(window.hits(t0 + 1s) == 11);
  const auto newest = window.increment(t0 + 2s, 9s);
  CHECK(newest.hits == 12);
  window.decrement(t0 + 3s, newest.counted_until);  // still in the ring
  CHECK(window.hits(t0 + 3s) == 11);

  // The four bucketed hits (0..4 ms, one given back) count until their bucket ends at 12 s.
  CHECK(window.hits(t0 + 10s) == 4);
  window.decrement(t0 + 11s, newest.counted_until);  // it has left the window: nothing to give
  CHECK(window.hits(t0 + 11s) == 4);
  CHECK(window.hits(t0 + 12s) == 0);
}

TEST_CASE("a sliding count is never below the true count and exact within its stated bound") {
  constexpr auto window = 1000ms;
  constexpr rc::duration bucket = (window + 2ns) / 3;  // ceil(window / 3)
  struct arrival {
    rc::time_point at;
    rc::time_point until;
    bool given_back = false;
  };
  std::mt19937_64 random{20240611};
  std::uniform_int_distribution<int> gap_ms{0, 400};
  std::bernoulli_distribution burst{0.3}, give_back{0.15};

  for (int run = 0; run < 40; ++run) {
    rc::sliding_window state;
    std::vector<arrival> log;
    auto now = t0 + std::chrono::milliseconds{run * 37};
    auto true_count = [&](rc::time_point t) {
      return std::count_if(log.begin(), log.end(), [&](const arrival& a) { return !a.given_back && a.until > t; });
    };
    auto arrivals_since = [&](rc::time_point from) {
      return std::count_if(log.begin(), log.end(), [&](const arrival& a) { return a.at > from; });
    };
    for (int step = 0; step < 400; ++step) {
      if (!burst(random)) now += std::chrono::milliseconds{gap_ms(random)};
      if (!log.empty() && give_back(random)) {
        auto& earlier = log[std::uniform_int_distribution<std::size_t>{0, log.size() - 1}(random)];
        if (!earlier.given_back) {
          state.decrement(now, earlier.until);
          earlier.given_back = earlier.until > now;
        }
      }
      const auto hit = state.increment(now, window);
      log.push_back({now, now + window});
      const auto truth = static_cast<std::uint64_t>(true_count(now));
      REQUIRE(hit.hits >= truth);
      if (arrivals_since(now - window - bucket) <= 8) REQUIRE(hit.hits == truth);

      const auto later = now + std::chrono::milliseconds{gap_ms(random) * 3};
      const auto counted = state.hits(later);
      REQUIRE(counted >= static_cast<std::uint64_t>(true_count(later)));
      if (arrivals_since(later - window - bucket) <= 8) {
        REQUIRE(counted == static_cast<std::uint64_t>(true_count(later)));
      }
    }
  }
}

TEST_CASE("a sliding limiter never admits more than its limit in any window of random traffic") {
  std::mt19937_64 random{7};
  std::uniform_int_distribution<int> gap_ms{0, 120};
  for (const std::uint64_t limit : {1, 3, 7, 20}) {
    std::vector<rc::time_point> arrivals;
    auto now = t0;
    for (int i = 0; i < 600; ++i) {
      arrivals.push_back(now += std::chrono::milliseconds{gap_ms(random)});
    }
    const auto passed = admitted<rc::sliding_window>(arrivals, limit, 1s);
    CHECK(most_in_any_window(passed, 1s) <= limit);
  }
}

TEST_CASE("window counters stay small and plain whatever the traffic") {
  STATIC_REQUIRE(sizeof(rc::sliding_window) <= 128);
  STATIC_REQUIRE(sizeof(rc::fixed_window) <= 16);
  STATIC_REQUIRE(std::is_default_constructible_v<rc::sliding_window>);
  STATIC_REQUIRE(std::is_default_constructible_v<rc::fixed_window>);
  STATIC_REQUIRE(std::is_trivially_copyable_v<rc::sliding_window>);
  STATIC_REQUIRE(std::is_trivially_copyable_v<rc::fixed_window>);

  rc::sliding_window window;
  auto now = t0;
  for (int i = 0; i < 100'000; ++i) window.increment(now += 1ms, 10s);
  // 10 s of 1 ms arrivals, plus at most one bucket (ceil(10 s / 3)) of hits that just left.
  CHECK(window.hits(now) >= 10'000);
  CHECK(window.hits(now) <= 10'000 + 3'334);
}

}  // namespace window_counter_test
