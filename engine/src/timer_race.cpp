#include "rc/timer_race.hpp"

#include <climits>

#if defined(__linux__)
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>
#endif

namespace rc::detail {

namespace {

#if defined(__linux__)
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "a futex word is 32 bits");

std::uint32_t* futex_word(std::atomic<std::uint32_t>& a) noexcept { return reinterpret_cast<std::uint32_t*>(&a); }

// Sleeps while `word` holds `seen`, until a wake or, when `until_ns` is not INT64_MAX, until that
// CLOCK_MONOTONIC instant (steady_clock's clock here). The timeout is a timer of the calling
// thread's core: that is the point of pinning the helpers.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen, std::int64_t until_ns) noexcept {
  timespec at{};
  timespec* timeout = nullptr;
  if (until_ns != INT64_MAX) {
    at.tv_sec = static_cast<time_t>(until_ns / 1'000'000'000);
    at.tv_nsec = static_cast<long>(until_ns % 1'000'000'000);
    timeout = &at;
  }
  // Absolute timeout on CLOCK_MONOTONIC: FUTEX_WAIT_BITSET without FUTEX_CLOCK_REALTIME.
  (void)::syscall(SYS_futex, futex_word(word), FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, seen, timeout, nullptr,
                  FUTEX_BITSET_MATCH_ANY);
}
#endif

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(timer_race::clock::now().time_since_epoch()).count();
}

}  // namespace

timer_race::timer_race(std::function<void()> poke, unsigned max_helpers) : poke_(std::move(poke)) {
#if defined(__linux__)
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < max_helpers; ++cpu)
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  if (cpus.size() < 2) return;  // one core: a helper would sleep on the same core's timer
  helpers_ = std::make_unique<helper[]>(cpus.size());
  threads_.reserve(cpus.size());
  for (std::size_t i = 0; i < cpus.size(); ++i) {
    helpers_[i].cpu = cpus[i];
    threads_.emplace_back([this, i] { run(helpers_[i]); });
  }
#else
  (void)max_helpers;
#endif
}

timer_race::~timer_race() {
  stop_.store(true, std::memory_order_seq_cst);
  for (std::size_t i = 0; i < threads_.size(); ++i) wake(helpers_[i]);
  for (auto& t : threads_) t.join();
}

void timer_race::aim(clock::time_point at) noexcept {
  if (threads_.empty()) return;
  const std::int64_t ns = at == clock::time_point::max()
                              ? none
                              : std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
#if defined(__linux__)
  // The caller's own timer for this instant is armed now, on this core: a helper here would add
  // a second timer on the same core, late whenever the first is.
  const int skip = ::sched_getcpu();
#else
  const int skip = -1;
#endif
  skip_cpu_.store(skip, std::memory_order_seq_cst);
  target_ns_.store(ns, std::memory_order_seq_cst);
  // Nothing aimed at: a helper wakes when it meant to and finds nothing.
  if (ns == none) return;
  // A helper asleep until no later than the new instant wakes by itself and reads it then: only
  // one asleep for longer, or until woken, needs the system call, and the one skipped none.
  for (std::size_t i = 0; i < threads_.size(); ++i) {
    helper& h = helpers_[i];
    if (h.cpu != skip && h.until.load(std::memory_order_seq_cst) > ns) wake(h);
  }
}

void timer_race::taken() noexcept {
  // No wake: a helper asleep until the old instant wakes then, finds nothing aimed at and sleeps on.
  if (!threads_.empty()) target_ns_.store(none, std::memory_order_release);
}

void timer_race::wake(helper& h) noexcept {
  h.word.fetch_add(1, std::memory_order_seq_cst);
#if defined(__linux__)
  (void)::syscall(SYS_futex, futex_word(h.word), FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, nullptr, nullptr, 0);
#endif
}

// Sleeps on the helper's word until `wake_at` (none: until woken), having said so in `until` for
// aim() to read. Returns at once, without sleeping, when the target moved from `target`
// meanwhile (aim() may have read the old `until` and left this helper asleep): the caller's loop
// looks again.
void timer_race::sleep(helper& h, std::uint32_t seen, std::int64_t target, std::int64_t wake_at) noexcept {
  // seq_cst on both sides: of this store-then-load and aim()'s store-then-load, at least one
  // sees the other's store (the helper the new target, or aim() a wake-up time it must bring
  // forward).
  h.until.store(wake_at, std::memory_order_seq_cst);
  if (target_ns_.load(std::memory_order_seq_cst) != target) return;
#if defined(__linux__)
  futex_wait(h.word, seen, wake_at);
#else
  (void)seen;
#endif
}

void timer_race::run(helper& h) {
#if defined(__linux__)
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(h.cpu, &one);
  // Unpinned (a cpuset that changed since), the helper still races, on whichever core it sleeps.
  (void)::pthread_setaffinity_np(::pthread_self(), sizeof one, &one);
  (void)::pthread_setname_np(::pthread_self(), "rc-timer-race");
  // Never ahead of the thread it stands in for: SCHED_IDLE runs a helper only where its core has
  // nothing else to run (a paused core's neighbour has not), so it never preempts that thread
  // when both wake together. Its timer is exact: no timer slack (50 us by default).
  sched_param idle{};
  (void)::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &idle);
  (void)::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  for (;;) {
    // The word first: a wake() after this load changes it, and the wait below returns at once.
    const std::uint32_t seen = h.word.load(std::memory_order_seq_cst);
    if (stop_.load(std::memory_order_seq_cst)) return;
    const std::int64_t target = target_ns_.load(std::memory_order_seq_cst);
    if (target == none || skip_cpu_.load(std::memory_order_seq_cst) == h.cpu) {
      // Nothing aimed at, or the instant's own timer is on this core: asleep until the next aim.
      sleep(h, seen, target, none);
    } else if (now_ns() >= target) {
      // Due and not taken up: the first helper here pokes, once for this instant; then all sleep
      // until the next aim.
      std::int64_t poked = poked_for_.load(std::memory_order_acquire);
      if (poked != target && poked_for_.compare_exchange_strong(poked, target, std::memory_order_acq_rel)) {
        pokes_.fetch_add(1, std::memory_order_relaxed);
        try {
          poke_();
        } catch (...) {  // the thread's own timer still fires: a lost poke only loses the race
        }
      }
      sleep(h, seen, target, none);
    } else {
      sleep(h, seen, target, target);
    }
  }
#else
  (void)h;
#endif
}

}  // namespace rc::detail
