// Throttle decision cost: the clock-free bucket math alone, and with the per-key table in front.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "rc/gates/keyed_lru.hpp"
#include "rc/gates/token_bucket.hpp"

namespace {

using namespace std::chrono_literals;

struct key_state {
  rc::token_bucket bucket;
  std::uint32_t waiters;
};

enum class mode { delay, reject };

// One shared bucket, time advancing by half a token's interval per decision: in reject mode about
// half the decisions are admitted, in delay mode every decision past the burst waits.
void BM_throttle_decision_unkeyed(benchmark::State& state, mode m) {
  const auto p = rc::bucket_params::from(10'000, 1s, std::nullopt);
  const rc::duration step = 50us;
  rc::token_bucket bucket;
  rc::time_point now{};
  for (auto _ : state) {
    now += step;
    if (m == mode::delay) {
      benchmark::DoNotOptimize(bucket.reserve(now, p));
    } else {
      benchmark::DoNotOptimize(bucket.try_acquire(now, p));
    }
  }
}
BENCHMARK_CAPTURE(BM_throttle_decision_unkeyed, reserve, mode::delay);
BENCHMARK_CAPTURE(BM_throttle_decision_unkeyed, try_acquire, mode::reject);

// touch + reserve per decision over distinct_keys keys, visited in a shuffled order, through a
// table of 10'000. With 1'000'000 keys every decision misses and evicts the least recently used
// bucket, which has refilled by then (each key reserves once per 10'000 decisions = 20 ms).
void BM_throttle_decision_keyed(benchmark::State& state, std::size_t distinct_keys) {
  constexpr std::size_t max_keys = 10'000;
  const auto p = rc::bucket_params::from(100, 1s, std::nullopt);
  const rc::duration step = 2us;

  std::vector<std::string> keys;
  keys.reserve(distinct_keys);
  for (std::size_t i = 0; i < distinct_keys; ++i) keys.push_back("user-" + std::to_string(i));
  std::shuffle(keys.begin(), keys.end(), std::mt19937_64(1));

  rc::keyed_lru<key_state> table(max_keys);
  rc::time_point now{};
  std::size_t next = 0;
  std::int64_t refused = 0;
  const auto can_evict = [&](const key_state& s) { return s.waiters == 0 && s.bucket.is_full(now, p); };
  for (auto _ : state) {
    now += step;
    key_state* s = table.touch(keys[next], can_evict);
    if (++next == keys.size()) next = 0;
    if (s == nullptr) {
      ++refused;
      continue;
    }
    benchmark::DoNotOptimize(s->bucket.reserve(now, p));
  }
  state.counters["refused"] = static_cast<double>(refused);
  state.counters["table_bytes_per_key"] = static_cast<double>(table.memory_bytes()) / static_cast<double>(table.size());
}
BENCHMARK_CAPTURE(BM_throttle_decision_keyed, 10k_keys_in_10k_table, 10'000);
BENCHMARK_CAPTURE(BM_throttle_decision_keyed, 1m_keys_through_10k_table, 1'000'000);

}  // namespace

BENCHMARK_MAIN();
