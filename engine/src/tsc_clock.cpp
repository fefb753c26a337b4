#include "rc/tsc_clock.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace rc::detail {

namespace {

// How long a line is read before it is put back on the kernel's clock: at most 4 ms, and no
// longer than the rate has been measured over, so that a sample's error (the width of its
// bracket) weighs no more on a line than on the rate it was measured with.
constexpr std::int64_t anchor_interval_ns = 4'000'000;
// How long the first calibration measures the counter's rate, once a process.
constexpr std::int64_t calibration_ns = 250'000;

std::int64_t interval_after(const counter_sample& base, const counter_sample& s) noexcept {
  return std::clamp(s.ns - base.ns, calibration_ns, anchor_interval_ns);
}

std::int64_t kernel_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

#if defined(__x86_64__)
// Ordered: neither earlier nor later instructions pass it (the sample's brackets).
std::uint64_t fenced_counter() noexcept {
  _mm_lfence();
  const std::uint64_t c = __rdtsc();
  _mm_lfence();
  return c;
}
#else
std::uint64_t fenced_counter() noexcept { return 0; }
#endif

// The kernel's time, and the counter at the middle of the tightest of `tries` brackets around it.
counter_sample take_sample(int tries) noexcept {
  counter_sample best;
  std::uint64_t best_width = UINT64_MAX;
  for (int i = 0; i < tries; ++i) {
    const std::uint64_t before = fenced_counter();
    const std::int64_t ns = kernel_ns();
    const std::uint64_t after = fenced_counter();
    if (after < before || after - before >= best_width) continue;
    best_width = after - before;
    best = {before + best_width / 2, ns};
  }
  if (best_width == UINT64_MAX) best = {fenced_counter(), kernel_ns()};
  return best;
}

bool counter_is_usable() noexcept {
#if defined(__x86_64__) && defined(__linux__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000U, &a, &b, &c, &d) == 0 || a < 0x80000007U) return false;
  if (__get_cpuid(0x80000007U, &a, &b, &c, &d) == 0 || (d & (1U << 8)) == 0) return false;  // invariant TSC
  try {
    std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    std::string source;
    return static_cast<bool>(in >> source) && source == "tsc";
  } catch (...) {
    return false;
  }
#else
  return false;
#endif
}

}  // namespace

counter_line next_counter_line(const counter_line& old, counter_sample& base, const counter_sample& s,
                               std::int64_t interval_ns) noexcept {
  const auto due_after = [interval_ns](std::uint64_t c, std::uint64_t rate) {
    if (rate == 0) return c;
    const auto ticks = (static_cast<uint128>(interval_ns) << 32) / rate;
    return c + static_cast<std::uint64_t>(std::min<uint128>(ticks, UINT64_MAX - c));
  };
  if (s.counter <= base.counter || s.counter < old.c0 || s.ns <= base.ns) {
    base = s;
    return {s.counter, std::max(s.ns, old.ns0), old.rate, due_after(s.counter, old.rate)};
  }
  // The latest the old line can have read: readings at or past its due re-anchor instead.
  const std::int64_t handed_out = old.rate == 0 ? s.ns : old.at(std::min(s.counter, old.due));
  const std::int64_t ns0 = std::max(s.ns, handed_out);
  const auto measured = (static_cast<uint128>(s.ns - base.ns) << 32) / static_cast<uint128>(s.counter - base.counter);
  std::uint64_t rate = static_cast<std::uint64_t>(std::min<uint128>(measured, UINT64_MAX));
  if (const std::int64_t ahead = ns0 - s.ns; ahead > 0 && interval_ns > 0) {
    const double slow = std::min(static_cast<double>(ahead) / static_cast<double>(interval_ns), max_counter_slew);
    rate = static_cast<std::uint64_t>(static_cast<double>(rate) * (1.0 - slow));
  }
  return {s.counter, ns0, rate, due_after(s.counter, rate)};
}

bool tsc_clock::usable() noexcept {
  static const bool ok = counter_is_usable();
  return ok;
}

tsc_clock& tsc_clock::instance() {
  static tsc_clock clock;
  return clock;
}

tsc_clock::tsc_clock() {
  // The first reads of a process can be slow (the vDSO's page, a sanitizer's interceptor): made
  // once before the base, which every later rate is measured from.
  (void)kernel_ns();
  (void)fenced_counter();
  base_ = take_sample(7);
  while (kernel_ns() - base_.ns < calibration_ns) {
  }
  const counter_sample s = take_sample(7);
  const counter_line first =
      next_counter_line(counter_line{base_.counter, base_.ns, 0, 0}, base_, s, interval_after(base_, s));
  seq_.store(1, std::memory_order_relaxed);
  publish(first);
  seq_.store(2, std::memory_order_release);
}

void tsc_clock::publish(const counter_line& l) noexcept {
  c0_.store(l.c0, std::memory_order_release);
  ns0_.store(l.ns0, std::memory_order_release);
  rate_.store(l.rate, std::memory_order_release);
  due_.store(l.due, std::memory_order_release);
  anchors_.fetch_add(1, std::memory_order_relaxed);
}

counter_line tsc_clock::line() const noexcept {
  for (;;) {
    const std::uint32_t seq = seq_.load(std::memory_order_acquire);
    const counter_line l = load_line();
    if ((seq & 1U) == 0 && seq_.load(std::memory_order_relaxed) == seq) return l;
  }
}

// The line is due (or the counter read before its anchor, or another thread is re-anchoring):
// the first reader to take the sequence re-anchors; a reader that finds it taken reads the
// kernel's clock rather than wait for a thread that may have been preempted.
std::int64_t tsc_clock::slow_now() noexcept {
  std::uint32_t seq = seq_.load(std::memory_order_acquire);
  if ((seq & 1U) != 0 || !seq_.compare_exchange_strong(seq, seq + 1, std::memory_order_acq_rel)) return kernel_ns();
  const counter_line old = load_line();
  const counter_sample s = take_sample(3);
  const counter_line next = next_counter_line(old, base_, s, interval_after(base_, s));
  publish(next);
  seq_.store(seq + 2, std::memory_order_release);
  return next.ns0;
}

}  // namespace rc::detail
