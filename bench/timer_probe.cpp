// timer-probe: how late the OS wakes a sleeping thread, on each of two cores and at the earlier of
// the two. Two threads, pinned to cores 0 and 1, each wait on a timerfd for the same absolute ticks
// (CLOCK_MONOTONIC, one every --interval-us, --ticks of them) and record how late they woke; the
// figures show whether the machine's late wake-ups stall one core at a time (the earlier of two
// is then seldom late) or the whole machine (both late together).
//
//   timer-probe [--ticks N] [--interval-us U]      (defaults: 3000 ticks, 1000 us)
//
// Prints one JSON object: per core and for the earlier of the two, p50 / p99 / max lateness in
// us, and how many ticks found both cores more than 200 us late. Linux only (thread affinity);
// exits 77 on a machine with one core.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "timer_lateness.hpp"

namespace {

// Pins the calling thread to `core`, then waits out every tick (bench::timer_lateness_us) into `late`.
void wait_ticks(int core, std::int64_t first, std::int64_t interval, std::size_t ticks, std::vector<double>& late) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  if (::pthread_setaffinity_np(::pthread_self(), sizeof set, &set) != 0)
    std::fprintf(stderr, "timer-probe: could not pin a thread to core %d\n", core);
  late = bench::timer_lateness_us(first, interval, ticks);
}

nlohmann::json summary(std::vector<double> late) {
  std::sort(late.begin(), late.end());
  return {{"p50_us", bench::percentile(late, 0.5)}, {"p99_us", bench::percentile(late, 0.99)}, {"max_us", late.back()}};
}

std::int64_t count_arg(std::string_view name, const char* value) {
  char* end = nullptr;
  const long long v = value != nullptr ? std::strtoll(value, &end, 10) : 0;
  if (value == nullptr || *end != '\0' || v < 1 || v > 100'000'000) {
    std::fprintf(stderr, "timer-probe: %.*s needs a whole number from 1 to 100000000\n", static_cast<int>(name.size()),
                 name.data());
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t ticks = 3000, interval_us = 1000;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--ticks") {
      ticks = count_arg(arg, i + 1 < argc ? argv[++i] : nullptr);
    } else if (arg == "--interval-us") {
      interval_us = count_arg(arg, i + 1 < argc ? argv[++i] : nullptr);
    } else {
      std::fprintf(stderr, "usage: timer-probe [--ticks N] [--interval-us U]\n");
      return 2;
    }
  }
  if (std::thread::hardware_concurrency() < 2) {
    std::fprintf(stderr, "timer-probe: needs two cores\n");
    return 77;  // ctest's "skipped" for its smoke test (SKIP_RETURN_CODE)
  }
  const std::int64_t interval = interval_us * 1000;
  const std::int64_t first = bench::monotonic_ns() + 10'000'000;  // both threads started and pinned by then
  const auto n = static_cast<std::size_t>(ticks);
  std::vector<double> late0, late1;
  std::thread a(wait_ticks, 0, first, interval, n, std::ref(late0));
  std::thread b(wait_ticks, 1, first, interval, n, std::ref(late1));
  a.join();
  b.join();
  if (late0.size() != n || late1.size() != n) {
    std::fprintf(stderr, "timer-probe: a timerfd could not be made or read\n");
    return 1;
  }

  std::vector<double> earlier(n);
  std::size_t both_late = 0;
  for (std::size_t i = 0; i < n; ++i) {
    earlier[i] = std::min(late0[i], late1[i]);
    both_late += late0[i] > 200 && late1[i] > 200;
  }
  const nlohmann::json out = {
      {"ticks", ticks},          {"interval_us", interval_us},         {"core0", summary(late0)},
      {"core1", summary(late1)}, {"earlier_of_two", summary(earlier)}, {"ticks_both_over_200us", both_late}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
