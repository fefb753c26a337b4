// timer-probe: how late the OS wakes a sleeping thread, on each of two cores and at the earlier of
// the two. Two threads, pinned to cores 0 and 1, each sleep to the same absolute ticks
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
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

std::int64_t to_ns(const timespec& t) { return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; }

std::int64_t monotonic_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return to_ns(t);
}

// Sleeps to each tick in turn on `core` and fills `late` with how late (ns) it woke for each.
void sleep_ticks(int core, std::int64_t first, std::int64_t interval, std::vector<std::int64_t>& late) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  if (::pthread_setaffinity_np(::pthread_self(), sizeof set, &set) != 0)
    std::fprintf(stderr, "timer-probe: could not pin a thread to core %d\n", core);
  for (std::size_t i = 0; i < late.size(); ++i) {
    const std::int64_t due = first + static_cast<std::int64_t>(i) * interval;
    const timespec t{static_cast<time_t>(due / 1'000'000'000), static_cast<long>(due % 1'000'000'000)};
    while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, nullptr) == EINTR) {
    }
    late[i] = monotonic_ns() - due;
  }
}

nlohmann::json summary(std::vector<std::int64_t> late) {
  std::sort(late.begin(), late.end());
  const auto at = [&](double q) {
    return late[static_cast<std::size_t>(q * static_cast<double>(late.size() - 1))] / 1e3;
  };
  return {{"p50_us", at(0.5)}, {"p99_us", at(0.99)}, {"max_us", late.back() / 1e3}};
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
  const std::int64_t first = monotonic_ns() + 10'000'000;  // both threads started and pinned by then
  std::vector<std::int64_t> late0(static_cast<std::size_t>(ticks)), late1(late0.size());
  std::thread a(sleep_ticks, 0, first, interval, std::ref(late0));
  std::thread b(sleep_ticks, 1, first, interval, std::ref(late1));
  a.join();
  b.join();

  std::vector<std::int64_t> earlier(late0.size());
  std::size_t both_late = 0;
  for (std::size_t i = 0; i < late0.size(); ++i) {
    earlier[i] = std::min(late0[i], late1[i]);
    both_late += late0[i] > 200'000 && late1[i] > 200'000;
  }
  const nlohmann::json out = {
      {"ticks", ticks},          {"interval_us", interval_us},         {"core0", summary(late0)},
      {"core1", summary(late1)}, {"earlier_of_two", summary(earlier)}, {"ticks_both_over_200us", both_late}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
