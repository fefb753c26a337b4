// Throttle decision cost: the clock-free bucket math alone, and with the per-key table in front;
// and what reading a refusal's deferred error costs, on one thread and on two at once, and as the
// HTTP server reads it.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "rc/error.hpp"
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

// A refusal's error made and its message read, as a transport does for each refusal it answers
// (the HTTP server's 429 body). With two threads, each reads its own errors: no lock is shared.
struct refusal_like_fields {
  std::int64_t n;
  std::string message() const { return "throttle rejected the exchange: rate limit exceeded, " + std::to_string(n); }
  nlohmann::json details() const { return {{"gate", "throttle"}, {"retry_after_ms", n}}; }
};
void BM_deferred_error_read(benchmark::State& state) {
  std::int64_t n = 0;
  for (auto _ : state) {
    const rc::error e = rc::deferred_error(rc::errc::rate_limited, true, refusal_like_fields{++n});
    benchmark::DoNotOptimize(e.message().size());
  }
}
BENCHMARK(BM_deferred_error_read)->Threads(1)->Threads(2)->UseRealTime();

// A keyed throttle's refusal as the HTTP server reads it for a 429: a status, a body and headers
// asked for (none of which a gate's details hold), retry_after_ms for Retry-After, then the
// message for the body. The fields answer retry_after_ms at hand and list the names their details
// hold, as the gates' own do.
struct listed_refusal_fields {
  std::int64_t n;
  nlohmann::json retry_after_ms;
  std::string message() const {
    return "throttle rejected the exchange: rate limit exceeded for key \"client-" + std::to_string(n) +
           "\". Retry after ~1000ms.";
  }
  nlohmann::json details() const {
    return {{"gate", "throttle"}, {"retry_after_ms", retry_after_ms}, {"key", "client-" + std::to_string(n)}};
  }
  const nlohmann::json* field(std::string_view name) const noexcept {
    return name == "retry_after_ms" ? &retry_after_ms : nullptr;
  }
  bool may_have(std::string_view name) const noexcept {
    return name == "gate" || name == "retry_after_ms" || name == "key";
  }
};
void BM_refusal_read_as_http(benchmark::State& state) {
  std::int64_t n = 0;
  for (auto _ : state) {
    ++n;
    const rc::error e = rc::deferred_error(rc::errc::rate_limited, true, listed_refusal_fields{n, 1000.0});
    benchmark::DoNotOptimize(e.detail("status"));
    benchmark::DoNotOptimize(e.detail("message"));
    benchmark::DoNotOptimize(e.detail("headers"));
    benchmark::DoNotOptimize(e.detail("retry_after_ms"));
    benchmark::DoNotOptimize(e.message().size());
  }
}
BENCHMARK(BM_refusal_read_as_http);

}  // namespace

BENCHMARK_MAIN();
