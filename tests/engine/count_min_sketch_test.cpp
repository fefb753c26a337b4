// The overflow sketch alone: plain keys, plain numbers, plain times.
#include "rc/gates/count_min_sketch.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <string>

namespace count_min_sketch_test {

using namespace std::chrono_literals;

namespace {

rc::time_point at(rc::duration since_epoch) { return rc::time_point{since_epoch}; }

// prefix + n (built with += rather than operator+, which trips a false GCC 12 warning).
std::string name(const char* prefix, std::uint64_t n) {
  std::string s = prefix;
  s += std::to_string(n);
  return s;
}

std::uint64_t add(rc::count_min_sketch& s, const std::string& key) {
  return s.add(s.locate(rc::count_min_sketch::hash(key)));
}
std::uint64_t estimate(const rc::count_min_sketch& s, const std::string& key) {
  return s.estimate(s.locate(rc::count_min_sketch::hash(key)));
}

}  // namespace

TEST_CASE("count-min sketch: the width is a power of two, memory is depth x width x 4 bytes, taken on first hit") {
  rc::count_min_sketch s(10'000);
  CHECK(s.width() == 16'384);
  CHECK(s.bytes() == 4 * 16'384 * 4);
  CHECK(s.memory_bytes() == 0);
  add(s, "a");
  CHECK(s.memory_bytes() == 262'144);
  CHECK(rc::count_min_sketch(1).width() == 64);
}

TEST_CASE("count-min sketch: one key alone is counted exactly, clear forgets") {
  rc::count_min_sketch s(1024);
  CHECK(estimate(s, "a") == 0);
  for (std::uint64_t i = 1; i <= 5; ++i) CHECK(add(s, "a") == i);
  CHECK(estimate(s, "a") == 5);
  s.clear();
  CHECK(estimate(s, "a") == 0);
}

TEST_CASE("count-min sketch: never under-counts, even when heavily overloaded") {
  // 20,000 keys with skewed counts (1 to 64 hits) in a sketch 64 columns wide: most columns are
  // shared by hundreds of keys, yet no estimate drops below its key's true count.
  rc::count_min_sketch s(64);
  std::mt19937_64 rng(7);
  std::map<std::string, std::uint64_t> truth;
  for (int i = 0; i < 100'000; ++i) {
    const auto k = name("k", rng() % 20'000 % (1 + rng() % 400));
    ++truth[k];
    CHECK(add(s, k) >= truth[k]);
  }
  std::size_t under = 0;
  for (const auto& [k, n] : truth) under += estimate(s, k) < n ? 1 : 0;
  CHECK(under == 0);
}

TEST_CASE("count-min sketch: the error bound for a given load") {
  // 3,000 keys with one hit each in 16,384 columns (the sketch of max_keys 10,000): n / width =
  // 0.18. A fresh key reads 0 unless all four of its counters are taken: about
  // (1 - e^-0.18)^4 = 0.08%, so at least 99% of 10,000 fresh keys read 0.
  rc::count_min_sketch s(10'000);
  for (int i = 0; i < 3'000; ++i) add(s, name("flood-", i));
  int fresh_zero = 0;
  for (int i = 0; i < 10'000; ++i) fresh_zero += estimate(s, name("new-", i)) == 0 ? 1 : 0;
  INFO(fresh_zero << " of 10,000 fresh keys read 0");
  CHECK(fresh_zero >= 9'900);
  // The keys counted read exactly 1, bar the rare ones whose four counters all collide.
  int exact = 0;
  for (int i = 0; i < 3'000; ++i) {
    const auto e = estimate(s, name("flood-", i));
    REQUIRE(e >= 1);
    exact += e == 1 ? 1 : 0;
  }
  CHECK(exact >= 2'970);

  // Heavier load: N = 64,000 hits over 8,000 keys in 1,024 columns, N / width = 62.5. A row
  // over-counts a key by 2 N / width or more with probability <= 1/2 (Markov), all four rows
  // with <= 1/16: at most 6.25% of keys (far fewer in practice).
  rc::count_min_sketch heavy(1024);
  std::mt19937_64 rng(11);
  std::map<std::string, std::uint64_t> truth;
  for (int i = 0; i < 64'000; ++i) {
    const auto k = std::to_string(rng() % 8'000);
    ++truth[k];
    add(heavy, k);
  }
  const double bound = 2.0 * 64'000 / 1024;
  std::size_t over = 0;
  for (const auto& [k, n] : truth) over += static_cast<double>(estimate(heavy, k) - n) >= bound ? 1 : 0;
  INFO(over << " of " << truth.size() << " keys over-counted by >= " << bound);
  CHECK(over * 16 <= truth.size());
}

TEST_CASE("sketch window, fixed: one window from the first hit, every key resets at its end") {
  rc::sketch_window<rc::fixed_window> w(1024);
  CHECK(w.is_idle(at(0ms)));
  auto a = w.cell_of("a");
  CHECK(a.increment(at(0ms), 10s).hits == 1);
  auto b = w.cell_of("b");
  const auto hb = b.increment(at(4s), 10s);
  CHECK(hb.hits == 1);
  CHECK(hb.reset_at == at(10s));  // the shared window's end, not b's first hit + 10 s
  CHECK(a.increment(at(9s), 10s).hits == 2);
  CHECK(a.retry_at(at(9s), 2) == at(10s));
  CHECK(a.retry_at(at(9s), 3) == at(9s));
  CHECK(a.retry_at(at(9s), 0) == rc::time_point::max());
  CHECK_FALSE(w.is_idle(at(9s)));
  CHECK(w.is_idle(at(10s)));
  CHECK(a.hits(at(10s)) == 0);
  CHECK(a.increment(at(10s), 10s).hits == 1);  // a new window [10 s, 20 s)
  CHECK(b.hits(at(10s)) == 0);
  CHECK(w.memory_bytes() == 4 * 1024 * 4);
}

TEST_CASE("sketch window, sliding: previous + current period, never below the true sliding count") {
  SECTION("periods roll with the window") {
    rc::sketch_window<rc::sliding_window> w(1024);
    auto a = w.cell_of("a");
    CHECK(a.increment(at(0s), 10s).hits == 1);  // period [0, 10)
    CHECK(a.increment(at(2s), 10s).hits == 2);
    const auto h = a.increment(at(12s), 10s);  // period [10, 20): previous holds 2
    CHECK(h.hits == 3);
    CHECK(h.reset_at == at(20s));  // the previous period's hits leave at its end
    CHECK(a.retry_at(at(12s), 3) == at(20s));
    CHECK(a.retry_at(at(12s), 1) == at(30s));
    CHECK(a.hits(at(20s)) == 1);
    CHECK(a.hits(at(30s)) == 0);
    CHECK_FALSE(w.is_idle(at(29s)));
    CHECK(w.is_idle(at(30s)));
    CHECK(a.increment(at(45s), 10s).hits == 1);  // both periods long gone: [40, 50)
    CHECK(w.memory_bytes() == 2 * 4 * 1024 * 4);
  }
  SECTION("random traffic of many keys against the exact count in (now - window, now]") {
    rc::sketch_window<rc::sliding_window> w(64);  // crowded on purpose
    std::mt19937_64 rng(3);
    std::map<std::string, std::deque<rc::time_point>> arrivals;
    rc::duration now{};
    std::size_t exact = 0;
    for (int i = 0; i < 20'000; ++i) {
      now += std::chrono::milliseconds(rng() % 5);
      const auto k = std::to_string(rng() % 300);
      auto& q = arrivals[k];
      q.push_back(at(now));
      while (q.front() <= at(now) - 1s) q.pop_front();
      const auto got = w.cell_of(k).increment(at(now), 1s).hits;
      REQUIRE(got >= q.size());
      exact += got == q.size() ? 1 : 0;
    }
    CHECK(exact > 0);
  }
}

}  // namespace count_min_sketch_test
