// Count-min sketch: per-key hit estimates in fixed memory, for the keys a full table cannot hold.
//
// count_min_sketch: `depth` rows of `width` uint32 counters (width a power of two). A key is
// hashed once (64 bits); each row takes its column from that hash mixed with the row's own seed,
// so the rows collide independently. add() uses the conservative update: only the counters equal
// to the key's current estimate (the row minimum) are raised, to estimate + 1. Hence, for every
// key and at any time:
//   - estimate(key) >= the key's true count (never under-counts: every row holds at least it);
//   - with N hits in the sketch, each row over-counts a key by at most the hits of the keys sharing
//     its column, on average N / width; all `depth` rows exceed that by a factor k with
//     probability at most k^-depth (Markov, rows independent). A fresh key reads 0 unless every
//     row's column is taken: with n distinct keys in the sketch, probability about
//     (1 - e^(-n / width))^depth.
// Counters saturate at 2^32 - 1 (an estimate that large refuses any limit a gate accepts).
//
// sketch_window<fixed_window> / sketch_window<sliding_window>: the sketch rolled with the gate's
// window, answering like the per-key counters (increment, decrement, retry_at, is_idle) for one
// key at a time, through cell():
//   fixed:   one sketch for a window opened by the first hit after the previous window ended, as
//            fixed_window does per key; all overflowed keys share that window's edges.
//   sliding: a previous and a current sketch over consecutive periods of length `window`; a key's
//            count is previous + current. Every hit of (now - window, now] lies in those two
//            periods, so this never under-counts; it over-counts by the hits that left the window
//            but are still in the previous period (up to one window older). The periods start
//            at the first hit and follow each other; pass the same window to every increment.
// decrement() does nothing: under the conservative update a counter may hold another key's hits,
// so taking one back could under-count that key. An overflowed hit is never given back.
// Nothing is allocated until the first hit; memory_bytes() is then fixed.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string_view>

#include "rc/gates/hash.hpp"
#include "rc/gates/window_counter.hpp"
#include "rc/time.hpp"

namespace rc {

class count_min_sketch {
 public:
  static constexpr std::size_t depth = 4;
  static constexpr std::size_t min_width = 64;

  /// Where one key's counters are: one index per row into the counter array.
  struct cells {
    std::array<std::uint32_t, depth> at{};
  };

  /// width_hint rounded up to a power of two, at least min_width. Allocates nothing.
  explicit count_min_sketch(std::size_t width_hint)
      : width_(std::bit_ceil(std::max(width_hint, min_width))), shift_(64 - std::countr_zero(width_)) {}

  count_min_sketch(count_min_sketch&&) noexcept = default;
  count_min_sketch& operator=(count_min_sketch&&) noexcept = default;

  std::size_t width() const noexcept { return width_; }
  /// Bytes of counters once allocated: depth * width * 4.
  std::size_t bytes() const noexcept { return depth * width_ * sizeof(std::uint32_t); }
  std::size_t memory_bytes() const noexcept { return counters_ ? bytes() : 0; }

  /// The same hash of a key's bytes as the keyed tables' (rc/gates/hash.hpp).
  static std::uint64_t hash(std::string_view key) noexcept { return detail::hash_key(key); }

  cells locate(std::uint64_t key_hash) const noexcept {
    cells c;
    for (std::size_t row = 0; row < depth; ++row) {
      const auto column = static_cast<std::uint32_t>(detail::mix64(key_hash ^ seeds[row]) >> shift_);
      c.at[row] = static_cast<std::uint32_t>(row * width_) + column;
    }
    return c;
  }

  std::uint64_t estimate(const cells& c) const noexcept {
    if (!counters_) return 0;
    std::uint32_t least = std::numeric_limits<std::uint32_t>::max();
    for (const std::uint32_t i : c.at) least = std::min(least, counters_[i]);
    return least;
  }

  /// Allocates the counters (zeroed) if not yet done; add() does it at the first hit.
  void allocate() {
    if (!counters_) counters_ = std::make_unique<std::uint32_t[]>(depth * width_);
  }

  /// Counts one hit of the key (conservative update) and returns its new estimate.
  std::uint64_t add(const cells& c) {
    allocate();
    const auto before = static_cast<std::uint32_t>(estimate(c));
    if (before == std::numeric_limits<std::uint32_t>::max()) return before;
    for (const std::uint32_t i : c.at) counters_[i] = std::max(counters_[i], before + 1);
    return std::uint64_t{before} + 1;
  }

  /// Forgets every hit; keeps the memory.
  void clear() noexcept {
    if (counters_) std::fill_n(counters_.get(), depth * width_, 0u);
  }

 private:
  // Fixed, distinct odd constants: a row's column depends on its own seed only.
  static constexpr std::array<std::uint64_t, depth> seeds{0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full,
                                                          0x165667b19e3779f9ull, 0xd6e8feb86659fd93ull};

  std::size_t width_;
  int shift_;
  std::unique_ptr<std::uint32_t[]> counters_;
};

template <class Counter>
class sketch_window;

/// One sketch for a window opened by the first hit after the previous window ended.
template <>
class sketch_window<fixed_window> {
 public:
  static constexpr std::size_t sketches = 1;

  explicit sketch_window(std::size_t width_hint) : sketch_(width_hint) {}

  class cell {
   public:
    hit_result increment(time_point now, duration window) {
      w_->roll(now, window);
      const std::uint64_t hits = w_->sketch_.add(c_);
      return {hits, w_->window_end_, w_->window_end_};
    }
    void decrement(time_point, time_point) noexcept {}
    time_point retry_at(time_point now, std::uint64_t limit) const noexcept {
      if (limit == 0) return time_point::max();
      return hits(now) < limit ? now : w_->window_end_;
    }
    std::uint64_t hits(time_point now) const noexcept { return w_->is_idle(now) ? 0 : w_->sketch_.estimate(c_); }
    bool is_idle(time_point now) const noexcept { return hits(now) == 0; }

   private:
    friend class sketch_window;
    cell(sketch_window* w, count_min_sketch::cells c) : w_(w), c_(c) {}
    sketch_window* w_;
    count_min_sketch::cells c_;
  };

  cell cell_of(std::string_view key) { return cell(this, sketch_.locate(count_min_sketch::hash(key))); }

  /// No hit counts any more: the whole sketch is past its window.
  bool is_idle(time_point now) const noexcept { return window_end_ <= now; }
  std::size_t memory_bytes() const noexcept { return sketch_.memory_bytes(); }
  /// What the counters take once the first key overflowed.
  std::size_t bytes() const noexcept { return sketch_.bytes(); }
  std::size_t width() const noexcept { return sketch_.width(); }

 private:
  void roll(time_point now, duration window) noexcept {
    if (window_end_ <= now) {
      sketch_.clear();
      window_end_ = now + std::max(window, duration::zero());
    }
  }

  count_min_sketch sketch_;
  time_point window_end_ = time_point::min();
};

/// A previous and a current sketch over consecutive periods of one window each.
template <>
class sketch_window<sliding_window> {
 public:
  static constexpr std::size_t sketches = 2;

  explicit sketch_window(std::size_t width_hint) : current_(width_hint), previous_(width_hint) {}

  class cell {
   public:
    hit_result increment(time_point now, duration window) {
      w_->roll(now, window);
      const std::uint64_t earlier = w_->previous_.estimate(c_);
      const std::uint64_t hits = earlier + w_->current_.add(c_);
      return {hits, reset_at(now, earlier), w_->period_end()};
    }
    void decrement(time_point, time_point) noexcept {}
    time_point retry_at(time_point now, std::uint64_t limit) const noexcept {
      if (limit == 0) return time_point::max();
      if (hits(now) < limit) return now;
      // At the period's end the previous hits leave; one period later the current ones.
      if (now < w_->period_end() && w_->current_.estimate(c_) < limit) return w_->period_end();
      return w_->period_end() + w_->window_;
    }
    std::uint64_t hits(time_point now) const noexcept {
      if (now >= w_->period_end() + w_->window_) return 0;
      if (now >= w_->period_end()) return w_->current_.estimate(c_);
      return w_->previous_.estimate(c_) + w_->current_.estimate(c_);
    }
    bool is_idle(time_point now) const noexcept { return hits(now) == 0; }

   private:
    friend class sketch_window;
    cell(sketch_window* w, count_min_sketch::cells c) : w_(w), c_(c) {}
    time_point reset_at(time_point now, std::uint64_t earlier) const noexcept {
      if (earlier > 0) return w_->period_end();
      return now < w_->period_end() ? w_->period_end() + w_->window_ : now;
    }
    sketch_window* w_;
    count_min_sketch::cells c_;
  };

  cell cell_of(std::string_view key) {
    return cell(this, current_.locate(count_min_sketch::hash(key)));  // both sketches share the layout
  }

  bool is_idle(time_point now) const noexcept { return started_ ? now >= period_end() + window_ : true; }
  std::size_t memory_bytes() const noexcept { return current_.memory_bytes() + previous_.memory_bytes(); }
  std::size_t bytes() const noexcept { return current_.bytes() + previous_.bytes(); }
  std::size_t width() const noexcept { return current_.width(); }

 private:
  time_point period_end() const noexcept { return period_start_ + window_; }

  // Moves the periods forward so that now lies in the current one.
  void roll(time_point now, duration window) {
    if (!started_) {
      current_.allocate();  // both at once, so memory_bytes() is fixed from the first hit
      previous_.allocate();
      started_ = true;
      window_ = std::max(window, duration{1});
      period_start_ = now;
      return;
    }
    if (now < period_end()) return;
    if (now < period_end() + window_) {
      std::swap(current_, previous_);
      current_.clear();
      period_start_ += window_;
      return;
    }
    current_.clear();
    previous_.clear();
    period_start_ += window_ * ((now - period_start_) / window_);
  }

  count_min_sketch current_;
  count_min_sketch previous_;
  time_point period_start_{};
  duration window_{1};
  bool started_ = false;
};

}  // namespace rc
