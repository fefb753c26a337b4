// timer_race: a wake-up raced on every core (context_options::timer_race).
//
// On a virtual machine the host pauses each virtual core now and then, for up to milliseconds. A
// thread asleep until an instant is woken by a timer interrupt on the core it slept on; when that
// core is paused, the wake-up waits for it, however idle the other core is. The pauses seldom hit
// two cores at once, so the earlier of two timers set on two cores for the same instant is rarely
// late. timer_race keeps one helper thread pinned to each core the process may run on (at most
// four); at each aim the helpers on the cores other than the caller's (whose own timer, armed
// beside the aim, is on that core) sleep with their own timers until the instant, and the first
// to wake while it has not been taken up calls `poke` (once per instant). The scheduler's poke
// posts to its io_context, which wakes the io thread from the helper's core, and Linux runs the
// woken thread on a core that runs: measured, the thread then wakes about as late as the earlier
// of the two cores (README, Benchmarks). One helper on one of the cores does not help, nor do helpers for a thread
// pinned to the paused core: the wake-up must come from the core that runs, and the thread must be
// free to move there.
//
// The helpers take no lock: the instant, the core skipped, the instant last poked for, and each
// helper's own wake-up time and word (what it sleeps on, a futex) are atomics. aim() costs two
// stores and a load per helper, plus a wake system call for each helper asleep past the new
// instant (after a poke, or when the instant moves earlier); taken() a store. Linux only:
// elsewhere, and where the process may run on one core only, there are no helpers and aim() does
// nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace rc::detail {

class timer_race {
 public:
  using clock = std::chrono::steady_clock;

  /// Starts one helper per core this process may run on, up to `max_helpers`: none when that is
  /// fewer than two. `poke` runs on a helper thread; it must not throw (what it throws is dropped).
  explicit timer_race(std::function<void()> poke, unsigned max_helpers = 4);
  ~timer_race();  // stops and joins the helpers
  timer_race(const timer_race&) = delete;
  timer_race& operator=(const timer_race&) = delete;

  /// How many helpers run (0: racing is off on this machine).
  unsigned helpers() const noexcept { return static_cast<unsigned>(threads_.size()); }
  /// The instant to wake for, replacing the one before; poke is called once for it, at or after
  /// it, unless taken() or aim() comes first, by a helper on another core than the caller's: call
  /// it on the thread, and so the core, whose own timer is armed for the instant. Any thread;
  /// never blocks.
  void aim(clock::time_point at) noexcept;
  /// The instant aimed at was taken up without the helpers (its own timer woke the thread in
  /// time): no poke for it. Any thread; a helper already past its check may still poke once.
  void taken() noexcept;
  /// How many times poke was called.
  std::uint64_t pokes() const noexcept { return pokes_.load(std::memory_order_relaxed); }

 private:
  static constexpr std::int64_t none = INT64_MAX;
  // One helper's state, on its own cache line.
  struct alignas(64) helper {
    int cpu = -1;                           // the core it is pinned to
    std::atomic<std::uint32_t> word{0};     // bumped to wake it; it sleeps on it (a futex)
    std::atomic<std::int64_t> until{none};  // when it wakes by itself (ns; none: only when woken)
  };
  void run(helper& h);
  void sleep(helper& h, std::uint32_t seen, std::int64_t target, std::int64_t wake_at) noexcept;
  static void wake(helper& h) noexcept;

  std::function<void()> poke_;
  std::atomic<std::int64_t> target_ns_{none};  // steady_clock nanoseconds since its epoch
  std::atomic<int> skip_cpu_{-1};              // the core aim() was called on: no helper there
  std::atomic<std::int64_t> poked_for_{none};  // the instant last poked for
  std::atomic<std::uint64_t> pokes_{0};
  std::atomic<bool> stop_{false};
  std::unique_ptr<helper[]> helpers_;  // one per thread
  std::vector<std::thread> threads_;
};

}  // namespace rc::detail
