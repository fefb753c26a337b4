// slow_down: lets the first `delay_after` hits of a key's window through at once and delays the
// rest by a growing amount (express-slow-down's rule, reference §3). It never refuses on its own.
//
// A hit is counted when the exchange arrives, so a burst gets consecutive hit numbers at once, in
// arrival order, and waiting exchanges count for those behind them. Leaving after a delay counts
// nothing: the window only sees arrivals.
//   delay(hit) = hit <= delay_after ? 0 : clamp(delay(hit), 0, max_delay)
// The rule receives the hit number (not the excess); the default is (hit - delay_after) * 1 s and a
// constant is valid (a fixed delay for every hit past delay_after).
//
// Counting: `sliding` (default) counts the key's arrivals in (now - window, now]; `fixed` is
// express's window per key, opened by its first hit and never moved (see gates/window_counter.hpp
// for the exactness bound of sliding and the memory it takes).
//
// The client gives up: with a deadline on the exchange, a delay that would reach it is not served;
// the exchange fails at once with RC5013 (details carry retry_after_ms: when a new request of the
// key would not be delayed at all). When the exchange's abort signal fires during the wait, it
// ends as dropped ("client-gone") and nothing downstream runs; the hit stays counted (express
// does the same). On shutdown (intake closed) a waiting exchange proceeds at once.
//
// Per-key counters live in a bounded LRU of max_keys entries that forgets only keys with no hit
// left in their window. When every candidate still counts, the new key is counted in a count-min
// sketch rolled with the window (gates/count_min_sketch.hpp): memory stays bounded, and each
// overflowed key is delayed by its own estimate (which only over-counts), not by the flood's.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "rc/exchange.hpp"
#include "rc/keys.hpp"
#include "rc/options.hpp"
#include "rc/step.hpp"
#include "rc/wrappers/keyed_gate.hpp"

namespace rc {

class decision_store;  // rc/gates/decision_store.hpp

namespace detail {
template <class T>
inline constexpr bool is_chrono_duration = false;
template <class Rep, class Period>
inline constexpr bool is_chrono_duration<std::chrono::duration<Rep, Period>> = true;
}  // namespace detail

/// A slow_down delay: a function of the hit number returning a std::chrono duration, or a constant
/// duration. Default-constructed means the default rule, (hit - delay_after) * 1 s.
class hit_delay {
 public:
  /// Nanoseconds as a double: any duration a rule returns converts without overflow.
  using value = std::chrono::duration<double, std::nano>;

  hit_delay() = default;
  template <class Rep, class Period>
  hit_delay(std::chrono::duration<Rep, Period> constant)  // NOLINT(google-explicit-constructor)
      : constant_(std::chrono::duration_cast<value>(constant)) {}
  // clang-format off
  template <class F>
    requires std::invocable<F&, std::uint64_t> &&
             detail::is_chrono_duration<std::decay_t<std::invoke_result_t<F&, std::uint64_t>>>
  hit_delay(F rule)  // NOLINT(google-explicit-constructor)
      : rule_([rule = std::move(rule)](std::uint64_t hit) mutable {
          return std::chrono::duration_cast<value>(rule(hit));
        }) {}
  // clang-format on

  bool is_default() const noexcept { return !rule_ && !constant_; }
  const std::optional<value>& constant() const noexcept { return constant_; }

  /// The unclamped delay for hit number `hit` (> delay_after). Calls the user's rule: may throw.
  value operator()(std::uint64_t hit, std::uint64_t delay_after) const {
    if (constant_) return *constant_;
    if (rule_) return rule_(hit);
    return std::chrono::seconds(hit - delay_after);
  }

 private:
  std::function<value(std::uint64_t)> rule_;
  std::optional<value> constant_;
};

struct slow_down_options {
  static constexpr std::size_t default_max_keys = 10000;
  static constexpr std::size_t max_keys_limit = 1000000;
  /// validate() evaluates a delay function at this many hits past delay_after; a negative result
  /// there is RC5003 (beyond them, as in express, a negative delay counts as none).
  static constexpr std::uint64_t checked_hits = 64;

  duration window = std::chrono::minutes(1);
  std::int64_t delay_after = 1;  // hits per window served without delay
  hit_delay delay;               // default (hit - delay_after) * 1 s
  duration max_delay = max_timer_wait;
  key_selector key;  // one window per key; none = one shared window
  std::size_t max_keys = default_max_keys;
  std::string label;
  rc::counting counting = rc::counting::sliding;
  /// A shared store (rc::redis_store): the counts live there, shared by every instance; none =
  /// in memory (docs/redis.md).
  std::shared_ptr<decision_store> store;

  /// RC5003 on the first invalid option: window, delay_after, delay, max_delay, max_keys, counting.
  void validate() const;
};

/// Builds the slow_down step around `inner` (null for a route-scope gate). Validates first.
std::unique_ptr<step> make_slow_down(slow_down_options options, std::unique_ptr<step> inner, scope s);

/// The builder's gate() extension point (found by ADL).
inline std::unique_ptr<step> make_gate(slow_down_options options, std::unique_ptr<step> inner, scope s) {
  return make_slow_down(std::move(options), std::move(inner), s);
}

}  // namespace rc
