// How late the OS wakes a sleeping thread, shared by rc-bench (the pacing scenario's OS-timer
// floor) and timer-probe (the same on each of two cores), so that both measure one wake path and
// read their percentiles alike. Linux (timerfd).
#pragma once

#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace bench {

inline std::int64_t monotonic_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

/// Waits on a bare timerfd (what Asio's reactor waits on) for `ticks` absolute deadlines, `first_ns`
/// and then one every `interval_ns` (CLOCK_MONOTONIC), and returns how late each wake-up was, in
/// microseconds, in tick order. Fewer (none) when the timerfd cannot be made or read.
inline std::vector<double> timer_lateness_us(std::int64_t first_ns, std::int64_t interval_ns, std::size_t ticks) {
  std::vector<double> late;
  const int fd = ::timerfd_create(CLOCK_MONOTONIC, 0);
  if (fd < 0) return late;
  late.reserve(ticks);
  for (std::size_t k = 0; k < ticks; ++k) {
    const std::int64_t due = first_ns + static_cast<std::int64_t>(k) * interval_ns;
    itimerspec spec{};
    spec.it_value = {static_cast<time_t>(due / 1'000'000'000), static_cast<long>(due % 1'000'000'000)};
    ::timerfd_settime(fd, TFD_TIMER_ABSTIME, &spec, nullptr);
    std::uint64_t expirations = 0;
    if (::read(fd, &expirations, sizeof expirations) != static_cast<ssize_t>(sizeof expirations)) break;
    late.push_back(static_cast<double>(monotonic_ns() - due) / 1e3);
  }
  ::close(fd);
  return late;
}

/// Nearest-rank percentile (p in [0, 1]) of sorted, non-empty values.
inline double percentile(const std::vector<double>& sorted, double p) {
  const auto i = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::min(i == 0 ? 0 : i - 1, sorted.size() - 1)];
}

}  // namespace bench
