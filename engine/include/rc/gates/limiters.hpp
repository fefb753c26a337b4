// Limiters: the clock-free decisions behind the rate gates, one per gate.
//
// A limiter answers one arrival of one key: decide(state, arrival, ticket) -> gate_decision
// (admit, wait a fixed time, queue in the key's FIFO, or refuse with a retry-after and a reason).
// The time is a field of the arrival; nothing here reads a clock, locks, or knows exchanges, so
// tests drive a limiter with plain numbers. The gate step (rc/gate_step.hpp) runs them: it keeps
// the per-key states and the queues, waits, and emits events.
//
//   throttle_limiter      token bucket; delay mode queues (FIFO), reject mode refuses
//   slow_down_limiter     hit counter; hits past delay_after wait a growing, fixed delay
//   rate_limit_limiter    hit counter; hits past limit are refused
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "rc/error.hpp"
#include "rc/gates/count_min_sketch.hpp"
#include "rc/gates/gate_decision.hpp"
#include "rc/gates/token_bucket.hpp"
#include "rc/gates/window_counter.hpp"
#include "rc/time.hpp"
#include "rc/wrappers/slow_down.hpp"
#include "rc/wrappers/throttle.hpp"

namespace rc {

/// throttle: a token bucket per key (see gates/token_bucket.hpp for the arithmetic).
struct throttle_limiter {
  using state = token_bucket;
  struct ticket {};

  throttle_mode mode = throttle_mode::delay;
  std::optional<duration> max_wait;
  std::optional<std::size_t> max_queue;
  bucket_params params{1, 1e9};

  bool idle(const token_bucket& b, time_point now) const { return b.is_full(now, params); }

  gate_decision decide(token_bucket& b, const gate_arrival& a, ticket& /*t*/) const {
    if (mode == throttle_mode::reject) {
      const auto r = b.try_acquire(a.now, params);
      return r.admitted ? gate_decision::admit() : gate_decision::refuse(r.retry_after, "rate limit exceeded");
    }
    // Behind waiters, a newcomer always queues, even if the bucket's refill says a token is
    // ready: that happens only when the queue is overdue (a stall), and the queue goes first.
    const bool behind = a.queued > 0;
    const duration wait = behind ? b.peek_enqueue(a.now, params) : b.peek_wait(a.now, params);
    if (!behind && wait == duration::zero()) {
      b.reserve(a.now, params);
      return gate_decision::admit();
    }
    if (max_wait && wait > *max_wait) return gate_decision::refuse(wait, "wait would exceed max_wait");
    if (max_queue && a.waiting >= *max_queue) return gate_decision::refuse(wait, "queue is full (max_queue)");
    if (a.can_queue) {
      if (behind)
        b.enqueue(a.now, params);
      else
        b.reserve(a.now, params);
    }
    return gate_decision::queued(wait);
  }

  /// A full table sends a new key to the shared overflow bucket in delay mode (it waits, paced,
  /// in the overflow's FIFO queue: delay mode drops nothing); reject mode refuses it.
  bool overflows() const { return mode == throttle_mode::delay; }
  /// decide() reads the whole gate's queue length (gate_arrival::waiting): the gate keeps one count.
  bool reads_waiting() const { return max_queue.has_value(); }

  /// Reject mode, every evictable key busy: refuse rather than meter this key with nothing.
  gate_decision table_full() const {
    return gate_decision::refuse(
        std::chrono::duration_cast<duration>(std::chrono::duration<double, std::nano>(params.interval_ns)),
        "key table full");
  }

  /// With `queued` waiters, how long until the first of them goes.
  duration head_wait(const token_bucket& b, time_point now, std::uint32_t queued) const {
    return b.head_wait(now, queued, params);
  }
  /// The head goes now. Woken a whole interval or more late (a stall), the schedule moves later
  /// instead of releasing the missed tickets at once (token_bucket::admit_head).
  void head_admitted(token_bucket& b, time_point now, std::uint32_t queued) const { b.admit_head(now, queued, params); }
  /// A waiter left without going: its ticket goes back.
  void give_back(token_bucket& b, time_point now) const { b.give_back(now, params); }
};

/// slow_down: a hit counter per key; hit n waits delay(n) from its arrival when n > delay_after.
template <class Counter>
struct slow_down_limiter {
  using state = Counter;
  using overflow_counter = sketch_window<Counter>;  // keys beyond the table: one estimate each
  struct ticket {
    time_point at{};  // the arrival
    hit_result hit{};
    duration delay{};
    duration time_left{};  // refused: until the exchange's deadline
  };

  duration window{};
  std::uint64_t delay_after = 1;
  hit_delay rule;
  duration max_delay = max_timer_wait;

  bool idle(const Counter& c, time_point now) const { return c.is_idle(now); }

  /// Counts at arrival; the hit number decides the delay, which never changes afterwards. A delay
  /// that would reach the exchange's deadline is refused, with the time until a new hit of the
  /// key would not be delayed at all. Throws RC5003 when the user's delay rule throws.
  template <class C>  // the key's Counter, or its cell in the overflow sketch
  gate_decision decide(C& c, const gate_arrival& a, ticket& t) const {
    t.at = a.now;
    t.hit = c.increment(a.now, window);
    t.delay = delay_for(t.hit.hits);
    if (t.delay == duration::zero()) return gate_decision::admit();
    if (a.deadline && a.now + t.delay >= *a.deadline) {
      const time_point quiet_at = c.retry_at(a.now, std::max<std::uint64_t>(delay_after, 1));
      t.time_left = std::max(*a.deadline - a.now, duration::zero());
      return gate_decision::refuse(quiet_at == time_point::max() ? window : quiet_at - a.now);
    }
    return gate_decision::wait_for(t.delay);
  }

  /// clamp(rule(hit), 0, max_delay) past delay_after, else zero.
  duration delay_for(std::uint64_t hit) const {
    if (hit <= delay_after) return duration::zero();
    double ns = 0;
    try {
      ns = rule(hit, delay_after).count();
    } catch (...) {
      throw error(
          errc::misconfigured,
          fmt::format("slow_down({{ delay }}) threw at hit {}; it must return a duration >= 0 for every hit ({})", hit,
                      message_of(std::current_exception())),
          false, std::current_exception());
    }
    if (!(ns > 0)) return duration::zero();  // negative (or NaN) means no delay, as in express
    if (ns >= static_cast<double>(max_delay.count())) return max_delay;
    return duration(std::llround(ns));
  }
};

/// rate_limit: a hit counter per key; hits past `limit` in a window are refused.
template <class Counter>
struct rate_limit_limiter {
  using state = Counter;
  using overflow_counter = sketch_window<Counter>;  // keys beyond the table: one estimate each
  struct ticket {
    time_point at{};
    hit_result hit{};
    duration reset{};  // until the key's count next drops
  };

  duration window{};
  std::uint64_t limit = 0;
  bool skip_failed = false;
  bool skip_successful = false;

  bool idle(const Counter& c, time_point now) const { return c.is_idle(now); }

  /// Counts the hit; refuses past the limit with the time until a new hit would pass (the reset
  /// for limit 0). Under skip_failed a refusal gives its own hit back at once (a refusal is a
  /// failed response).
  template <class C>  // the key's Counter, or its cell in the overflow sketch
  gate_decision decide(C& c, const gate_arrival& a, ticket& t) const {
    t.at = a.now;
    t.hit = c.increment(a.now, window);
    t.reset = std::max(t.hit.reset_at - a.now, duration::zero());
    if (t.hit.hits <= limit) return gate_decision::admit();
    if (skip_failed) c.decrement(a.now, t.hit.counted_until);
    time_point retry_at = c.retry_at(a.now, limit);
    if (retry_at == time_point::max()) retry_at = t.hit.reset_at;  // limit 0: never; say the reset
    return gate_decision::refuse(std::max(retry_at - a.now, duration::zero()));
  }

  bool wants_outcome() const { return skip_successful || skip_failed; }
  /// The downstream outcome of an admitted hit: skip_successful / skip_failed give it back (only
  /// inside the window it was counted in).
  void outcome(Counter& c, time_point now, const ticket& t, bool succeeded) const {
    if (succeeded ? skip_successful : skip_failed) c.decrement(now, t.hit.counted_until);
  }
};

}  // namespace rc
