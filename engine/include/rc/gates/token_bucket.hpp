// Token bucket: the clock-free arithmetic behind throttle (reference section 5.2).
//
// The whole state is one number, empty_at: the time (ns since the rc epoch) at which the bucket
// would hold zero tokens. Refill is implicit, tokens(now) = min(capacity, (now - empty_at) /
// interval), so there is no "last refill" to keep in step with a token count, and a per-key bucket
// costs 8 bytes. Taking a token moves empty_at one interval later. In delay mode it may move past
// now (debt): each waiter's ticket is one interval after the previous one. The throttle keeps the
// waiters in a FIFO queue and wakes the first on the earliest outstanding ticket (head_wait,
// admit_head), so a waiter that leaves gives its ticket back and the ones behind move up.
// This is the reference's "refill, then tokens -= 1" rewritten as
// empty_at = max(empty_at, now - capacity * interval) + interval.
//
// Time is a parameter of every call and nothing here reads a clock: tests drive buckets with plain
// numbers and the engine passes its clock's now. The options live in bucket_params, shared by all
// buckets of one throttle. No locking: callers serialise access to a bucket.
//
// Precision: with a whole-number interval (rate 10/s: 100'000'000 ns) every step is exact while
// times stay below 2^53 ns (104 days). A fractional interval costs at most half an ulp of empty_at
// per token (2^-7 ns at one day); waits that should be whole ns are snapped to them (wait_until).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "rc/time.hpp"

namespace rc {

/// A throttle's resolved options, shared by every bucket it owns.
struct bucket_params {
  double capacity;     ///< tokens in a full bucket, >= 1
  double interval_ns;  ///< time to refill one token, finite and > 0

  /// The reference's resolved form: capacity = max(1, burst ?? rate), one token every per / rate.
  /// rate and burst must have passed throttle validation (finite, > 0).
  static bucket_params from(double rate, duration per, std::optional<double> burst = {}) {
    return {std::max(1.0, burst.value_or(rate)), static_cast<double>(per.count()) / rate};
  }
};

class token_bucket {
 public:
  struct acquire_result {
    bool admitted;
    duration retry_after;  ///< zero when admitted
  };

  /// Delay mode: takes one token, going into debt if needed, and returns how long the caller must
  /// wait before proceeding (rounded up to whole ns, capped at max_timer_wait).
  duration reserve(time_point now, const bucket_params& p) noexcept {
    empty_at_ = empty_at_after_take(now, p);
    return wait_until(empty_at_, now, p, max_timer_wait);
  }

  /// Delay mode, behind exchanges that already wait: takes the ticket one interval after the last
  /// one handed out, with no refill cap (the bucket owes every queued ticket), so the tickets of
  /// the `queued` waiters are always the newest `queued` ones, one interval apart. The returned
  /// wait (zero if the queue is overdue after a stall) is what the newcomer can expect.
  duration enqueue(time_point now, const bucket_params& p) noexcept {
    empty_at_ += p.interval_ns;
    return wait_until(empty_at_, now, p, max_timer_wait);
  }

  /// What enqueue would return now, without taking the ticket.
  duration peek_enqueue(time_point now, const bucket_params& p) const noexcept {
    return wait_until(empty_at_ + p.interval_ns, now, p, max_timer_wait);
  }

  /// With `queued` (>= 1) waiters, how long until the earliest outstanding ticket, the one the
  /// first of them goes on.
  duration head_wait(time_point now, std::uint32_t queued, const bucket_params& p) const noexcept {
    return wait_until(head_ticket(queued, p), now, p, max_timer_wait);
  }

  /// The first of `queued` waiters goes `now`, on the earliest outstanding ticket (head_wait has
  /// run out). Late by a whole interval or more (the process stalled), it does not release the
  /// tickets that fell due meanwhile in a burst: the schedule, and with it every ticket still
  /// queued, moves later by the whole intervals lost (returned). Each admission thus stays less
  /// than one interval behind its ticket, which keeps burst + rate * t for every window t that is
  /// a whole number of intervals (a 1 s window at rate 1000/s), stall or not.
  std::uint64_t admit_head(time_point now, std::uint32_t queued, const bucket_params& p) noexcept {
    const double late = ns(now) - head_ticket(queued, p);
    const double noise = std::abs(ns(now)) * 0x1p-48;
    const double whole = std::floor((late + noise) / p.interval_ns);
    if (!(whole >= 1)) return 0;
    empty_at_ += whole * p.interval_ns;
    return whole < 0x1p63 ? static_cast<std::uint64_t>(whole) : UINT64_MAX;
  }

  /// What reserve would return now, without taking the token.
  duration peek_wait(time_point now, const bucket_params& p) const noexcept {
    return wait_until(empty_at_after_take(now, p), now, p, max_timer_wait);
  }

  /// Reject mode: takes a token if one is available; otherwise takes nothing (a rejection never
  /// puts the bucket in debt) and says when the next token will be ready.
  acquire_result try_acquire(time_point now, const bucket_params& p) noexcept {
    const double next = empty_at_after_take(now, p);
    const duration retry_after = wait_until(next, now, p, duration::max());
    if (retry_after > duration::zero()) return {false, retry_after};
    empty_at_ = next;
    return {true, duration::zero()};
  }

  /// Returns one token, e.g. for a reservation that was abandoned. Never fills above capacity.
  void give_back(time_point now, const bucket_params& p) noexcept {
    empty_at_ = std::max(empty_at_ - p.interval_ns, empty_at_when_full(now, p));
  }

  /// True when the bucket is full, so forgetting it would not change any future answer.
  bool is_full(time_point now, const bucket_params& p) const noexcept {
    return empty_at_ <= empty_at_when_full(now, p);
  }

  /// Tokens available now; negative while in debt.
  double tokens(time_point now, const bucket_params& p) const noexcept {
    return std::min(p.capacity, (ns(now) - empty_at_) / p.interval_ns);
  }

 private:
  static double ns(time_point t) noexcept { return static_cast<double>(t.time_since_epoch().count()); }

  double head_ticket(std::uint32_t queued, const bucket_params& p) const noexcept {
    return empty_at_ - static_cast<double>(queued - 1) * p.interval_ns;
  }

  // Any empty_at at or before this describes a full bucket.
  static double empty_at_when_full(time_point now, const bucket_params& p) noexcept {
    return ns(now) - p.capacity * p.interval_ns;
  }

  double empty_at_after_take(time_point now, const bucket_params& p) const noexcept {
    return std::max(empty_at_, empty_at_when_full(now, p)) + p.interval_ns;
  }

  // The wait from now until `until`, rounded up to whole ns so nobody is admitted early. Rounding
  // noise goes first: a wait within 2^-48 of the largest operand (16 to 32 ulps) of a whole number
  // is taken to be that number. So rate 3/s paces the sixth simultaneous arrival at exactly 1 s,
  // and a bucket that holds exactly one token admits.
  static duration wait_until(double until, time_point now, const bucket_params& p, duration cap) noexcept {
    const double now_ns = ns(now);
    const double wait_ns = until - now_ns;
    const double largest = std::max({std::abs(now_ns), std::abs(until), p.capacity * p.interval_ns});
    const double noise = largest * 0x1p-48;
    if (wait_ns <= noise) return duration::zero();
    const double nearest = std::round(wait_ns);
    const double whole = std::abs(wait_ns - nearest) <= noise ? nearest : std::ceil(wait_ns);
    if (!(whole < static_cast<double>(cap.count()))) return cap;
    return duration(static_cast<duration::rep>(whole));
  }

  double empty_at_ = -std::numeric_limits<double>::infinity();  // -infinity: full
};

}  // namespace rc
