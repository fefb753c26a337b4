// Per-key hit counters for the slow_down and rate_limit gates: small values, time is a parameter.
//
// fixed_window: express's MemoryStore. A key's window opens at its first hit after the previous
//   window expired (window_end <= now) and never moves; every hit counts until window_end.
// sliding_window: an arrival's hit number is the number of counted arrivals of its key in
//   (now - window, now], itself included; a hit counts while now < its arrival + window.
//   The 8 most recent hits keep their own expiry. Older hits are binned by expiry into 4
//   buckets of g = ceil(window / 3) and count until their bucket ends, up to g after they truly
//   left the window. Hence, at any time t:
//     - the count is never below the true count, so a limiter admitting hit <= limit never admits
//       more than limit in any window of length `window`;
//     - it is exact whenever the key had at most 8 counted arrivals in (t - window - g, t];
//       otherwise the excess is at most the arrivals in (t - window - g, t - window].
//   120 bytes per key whatever the traffic (checked below).
//
// Both: default-constructed means no hits. Per state, pass the same window to every increment and
// a `now` that does not go backwards (a sliding_window treats an earlier `now` as its latest
// arrival, which can only over-count). decrement(now, counted_until) gives back one hit, at most
// once per hit, using the hit_result::counted_until that increment returned; it does nothing once
// that hit has stopped counting, so it never reduces a later window.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "rc/time.hpp"

namespace rc {

struct hit_result {
  std::uint64_t hits;        ///< this arrival's hit number, itself included
  time_point reset_at;       ///< when the key's count next drops
  time_point counted_until;  ///< when this hit stops counting: the handle for decrement()
};

class fixed_window {
 public:
  hit_result increment(time_point now, duration window) noexcept {
    if (window_end_ <= now) {
      hits_ = 0;
      window_end_ = now + std::max(window, duration::zero());
    }
    ++hits_;
    return {hits_, window_end_, window_end_};
  }

  void decrement(time_point now, time_point counted_until) noexcept {
    if (now < counted_until && counted_until == window_end_ && hits_ > 0) --hits_;
  }

  std::uint64_t hits(time_point now) const noexcept { return is_idle(now) ? 0 : hits_; }
  time_point reset_at() const noexcept { return window_end_; }
  time_point reset_at(time_point /*now*/) const noexcept { return window_end_; }

  /// Earliest time at which a new arrival would get a hit number <= limit (max() if never).
  time_point retry_at(time_point now, std::uint64_t limit) const noexcept {
    if (limit == 0) return time_point::max();
    return hits(now) < limit ? now : window_end_;
  }

  bool is_idle(time_point now) const noexcept { return window_end_ <= now; }

 private:
  std::uint64_t hits_ = 0;
  time_point window_end_ = time_point::min();
};

class sliding_window {
 public:
  static constexpr std::size_t exact_hits = 8;
  static constexpr std::size_t bucket_count = 4;

  hit_result increment(time_point now, duration window) noexcept {
    window = std::max(window, duration::zero());
    bucket_width_ = std::max(duration{1}, ceil_div(window, bucket_count - 1));
    auto expiry = now + window;
    if (size_ > 0) expiry = std::max(expiry, expiries_[size_ - 1]);

    drop_expired(now);
    const auto earlier_hits = hits(now);
    if (size_ == exact_hits) {
      bin(expiries_[0], now);
      erase(0);
    }
    expiries_[size_++] = expiry;
    // +1 rather than hits(now): with a zero window the new hit has already stopped counting.
    return {earlier_hits + 1, reset_at(now), expiry};
  }

  void decrement(time_point now, time_point counted_until) noexcept {
    if (counted_until <= now) return;
    for (std::size_t i = size_; i-- > 0;) {
      if (expiries_[i] == counted_until) {
        erase(i);
        return;
      }
    }
    const auto index = bucket_of(counted_until);
    if (index <= newest_bucket_ && index > newest_bucket_ - std::int64_t{bucket_count}) {
      auto& count = slot(index);
      if (count > 0) --count;
    }
  }

  std::uint64_t hits(time_point now) const noexcept {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < size_; ++i) total += expiries_[i] > now ? 1 : 0;
    for (std::int64_t k = 0; k < std::int64_t{bucket_count}; ++k) {
      const auto index = newest_bucket_ - k;
      if (bucket_end(index) > now) total += slot(index);
    }
    return total;
  }

  /// When the count next drops (the oldest counted hit stops counting); `now` if nothing counts.
  time_point reset_at(time_point now) const noexcept {
    auto earliest = time_point::max();
    for (std::size_t i = 0; i < size_; ++i) {
      if (expiries_[i] > now) {
        earliest = expiries_[i];
        break;
      }
    }
    for (std::int64_t k = 0; k < std::int64_t{bucket_count}; ++k) {
      const auto index = newest_bucket_ - k;
      if (slot(index) > 0 && bucket_end(index) > now) {
        earliest = std::min(earliest, bucket_end(index));
      }
    }
    return earliest == time_point::max() ? now : earliest;
  }

  /// Earliest time at which a new arrival would get a hit number <= limit (max() if never).
  time_point retry_at(time_point now, std::uint64_t limit) const noexcept {
    if (limit == 0) return time_point::max();
    const auto counted = hits(now);
    if (counted < limit) return now;
    auto must_leave = counted - limit + 1;
    // Walk the counted hits in the order they stop counting: buckets oldest first, merged with
    // the exact expiries (a bucket may end after some newer exact hit).
    std::size_t exact = 0;
    while (exact < size_ && expiries_[exact] <= now) ++exact;
    std::int64_t index = newest_bucket_ - std::int64_t{bucket_count} + 1;
    for (;;) {
      while (index <= newest_bucket_ && (slot(index) == 0 || bucket_end(index) <= now)) ++index;
      const bool take_bucket = index <= newest_bucket_ && (exact == size_ || bucket_end(index) <= expiries_[exact]);
      if (take_bucket) {
        if (slot(index) >= must_leave) return bucket_end(index);
        must_leave -= slot(index);
        ++index;
      } else if (exact < size_) {
        if (must_leave == 1) return expiries_[exact];
        --must_leave;
        ++exact;
      } else {
        return time_point::max();  // unreachable: must_leave never exceeds what counts
      }
    }
  }

  bool is_idle(time_point now) const noexcept { return hits(now) == 0; }

 private:
  static constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) noexcept {
    const auto q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
  }
  static constexpr duration ceil_div(duration d, std::size_t parts) noexcept {
    const auto n = static_cast<std::int64_t>(parts);
    return duration{(d.count() + n - 1) / n};
  }

  std::int64_t bucket_of(time_point expiry) const noexcept {
    return floor_div(expiry.time_since_epoch().count(), bucket_width_.count());
  }
  // Every hit in bucket `index` is treated as counting until the bucket's end.
  time_point bucket_end(std::int64_t index) const noexcept { return time_point{bucket_width_ * (index + 1)}; }
  std::uint64_t& slot(std::int64_t index) noexcept {
    return bucket_hits_[static_cast<std::uint64_t>(index) % bucket_count];
  }
  std::uint64_t slot(std::int64_t index) const noexcept {
    return bucket_hits_[static_cast<std::uint64_t>(index) % bucket_count];
  }

  void drop_expired(time_point now) noexcept {
    std::size_t expired = 0;
    while (expired < size_ && expiries_[expired] <= now) ++expired;
    if (expired == 0) return;
    std::copy(expiries_.begin() + expired, expiries_.begin() + size_, expiries_.begin());
    size_ = static_cast<std::uint8_t>(size_ - expired);
  }

  void erase(std::size_t i) noexcept {
    std::copy(expiries_.begin() + i + 1, expiries_.begin() + size_, expiries_.begin() + i);
    --size_;
  }

  // Moves a hit that leaves the exact ring into the bucket of its expiry. Evicted expiries never
  // decrease, so a hit lands in the newest bucket or opens a newer one; the slots it recycles
  // held buckets that have ended, because g * (bucket_count - 1) >= window.
  void bin(time_point expiry, time_point now) noexcept {
    auto index = bucket_of(expiry);
    if (bucket_hits_ == decltype(bucket_hits_){}) {
      newest_bucket_ = index;
    } else if (index > newest_bucket_) {
      std::uint64_t carried = 0;
      const auto first = std::max(newest_bucket_ + 1, index - std::int64_t{bucket_count} + 1);
      for (auto i = first; i <= index; ++i) {
        // Only a window that changed between calls leaves a live bucket here: keep its hits.
        if (bucket_end(i - std::int64_t{bucket_count}) > now) carried += slot(i);
        slot(i) = 0;
      }
      newest_bucket_ = index;
      slot(index) = carried;
    } else {
      // Not reached while the window stays the same; a later bucket over-counts, never under.
      index = std::max(index, newest_bucket_ - std::int64_t{bucket_count} + 1);
    }
    ++slot(index);
  }

  std::array<time_point, exact_hits> expiries_{};  // [0, size_) ascending
  std::array<std::uint64_t, bucket_count> bucket_hits_{};
  duration bucket_width_{1};
  std::int64_t newest_bucket_ = 0;
  std::uint8_t size_ = 0;
};

static_assert(sizeof(fixed_window) <= 16);
static_assert(sizeof(sliding_window) <= 120);

}  // namespace rc
