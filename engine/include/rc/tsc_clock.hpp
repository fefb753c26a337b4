// tsc_clock: the real-time engine clock read from the processor's time-stamp counter.
//
// steady_clock (CLOCK_MONOTONIC) costs about 25 ns a read on the machines this engine is measured
// on, most of it the ordering fence the kernel puts before its own counter read; a keyed throttle
// reads the clock once an exchange, which made the clock a tenth of the decision. This clock
// reads the counter without the fence and maps it onto steady_clock's time line through a line
// (an anchor and a rate) that it re-anchors against steady_clock every 4 ms (sooner in the first
// milliseconds of a process: never after longer than the rate has been measured over):
//
// - it reads steady_clock's time (nanoseconds since steady_clock's epoch), within a fraction of a
//   microsecond: at each anchor the line is put back on the kernel's clock (never before it: a
//   line that ran ahead is slowed down, at most 0.5%, until the kernel's clock meets it), and the
//   rate is measured over the whole life of the process;
// - each thread's readings never go back (each thread keeps its last reading: the unfenced read
//   may be taken a few instructions early, and a re-anchor may move the line a few ns);
// - between threads, two readings may be out of order by a few ns, as two readings taken before
//   a lock may be with any clock: the engine's limiters keep their state with max(), not with the
//   order of the calls.
//
// It is used only where the kernel itself keeps time with the counter (clocksource "tsc", which
// the kernel picks only after checking that the counters of all cores agree) and the counter runs
// at a constant rate (CPUID's invariant TSC). Elsewhere, and when context_options::tsc_clock is
// false, the engine reads steady_clock. Waits stay on steady_clock: a timer that falls due was
// due by the kernel's clock (context.cpp).
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace rc::detail {

__extension__ typedef unsigned __int128 uint128;  // GCC and Clang; the line's products

/// One reading of the counter and of the kernel's clock, taken together.
struct counter_sample {
  std::uint64_t counter = 0;
  std::int64_t ns = 0;  // steady_clock's time, ns since its epoch
};

/// The counter's line: at counter c it reads ns0 + (c - c0) * rate / 2^32 (rate in ns a tick,
/// 32.32 fixed point). Counters before c0 read ns0. It is read up to counter `due` only: the first
/// reading at or past it re-anchors, so no value of the line past `due` is ever handed out.
struct counter_line {
  std::uint64_t c0 = 0;
  std::int64_t ns0 = 0;
  std::uint64_t rate = 0;  // 0: not calibrated yet
  std::uint64_t due = 0;

  std::int64_t at(std::uint64_t c) const noexcept {
    if (c <= c0) return ns0;
    return ns0 + static_cast<std::int64_t>((static_cast<uint128>(c - c0) * rate) >> 32);
  }
};

/// The discipline, apart from the hardware (tests drive it with made-up counters). Given the
/// line in use, the first sample of the process (`base`), a new sample `s` and the time to the
/// next anchor (`interval_ns`), the line from `s` on:
/// - it starts at the later of the kernel's time and the latest the old line could have read
///   (its value at `s` or at its `due`, the earlier): it never steps back;
/// - its rate is the rate measured from `base` to `s`, slowed so that a line ahead of the kernel
///   meets it at the next anchor, by at most max_counter_slew;
/// - its `due` is `interval_ns` on, at that rate;
/// - a counter that went back (`s` not after `base` or before the old anchor) starts a new base
///   at `s`, the line held at the later of the kernel's time and its old anchor, its rate kept.
/// Returns the new line; `base` is updated when a new one starts.
counter_line next_counter_line(const counter_line& old, counter_sample& base, const counter_sample& s,
                               std::int64_t interval_ns) noexcept;

/// The largest slow-down of a line ahead of the kernel's clock (0.5%).
inline constexpr double max_counter_slew = 0.005;

/// The process's counter clock. Any thread; lock-free readers (a seqlock: the reader that finds
/// the line due re-anchors it; one that meets a re-anchor under way reads steady_clock instead).
class tsc_clock {
 public:
  /// Whether the counter can be used on this machine: x86-64, invariant TSC, clocksource "tsc".
  /// Asked once a process.
  static bool usable() noexcept;
  /// The process's clock (usable() must be true).
  static tsc_clock& instance();

  /// steady_clock's time now, in ns since its epoch.
  std::int64_t now_ns() noexcept {
    const std::uint32_t seq = seq_.load(std::memory_order_acquire);
    const counter_line l = load_line();
    const std::uint64_t c = read_counter();
    std::int64_t t;
    if ((seq & 1U) != 0 || seq_.load(std::memory_order_relaxed) != seq || c >= l.due || c < l.c0)
      t = slow_now();
    else
      t = l.at(c);
    if (t < last_) t = last_;
    last_ = t;
    return t;
  }

  /// The line in use (tests).
  counter_line line() const noexcept;
  /// How many times the line was re-anchored (tests).
  std::uint64_t anchors() const noexcept { return anchors_.load(std::memory_order_relaxed); }

  tsc_clock(const tsc_clock&) = delete;
  tsc_clock& operator=(const tsc_clock&) = delete;

 private:
  tsc_clock();
  // Unfenced: the read may be taken a few instructions early or late (see the file comment).
  static std::uint64_t read_counter() noexcept {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return 0;
#endif
  }
  // The fields as they are; a reader checks seq_ around it. Acquire: the seq_ load after it
  // cannot move before it.
  counter_line load_line() const noexcept {
    return {c0_.load(std::memory_order_acquire), ns0_.load(std::memory_order_acquire),
            rate_.load(std::memory_order_acquire), due_.load(std::memory_order_acquire)};
  }
  std::int64_t slow_now() noexcept;
  void publish(const counter_line& l) noexcept;  // seq_ odd, held by the caller

  static inline thread_local std::int64_t last_ = INT64_MIN;

  alignas(64) std::atomic<std::uint32_t> seq_{0};  // odd while the line is rewritten
  std::atomic<std::uint64_t> c0_{0};
  std::atomic<std::int64_t> ns0_{0};
  std::atomic<std::uint64_t> rate_{0};
  std::atomic<std::uint64_t> due_{0};  // the counter at which to re-anchor
  std::atomic<std::uint64_t> anchors_{0};
  // Read and written by the re-anchoring thread only (it holds seq_ odd).
  counter_sample base_;
};

}  // namespace rc::detail
