// spin_mutex: the lock a gate holds for its decision.
//
// A gate's critical section is a table lookup and a few arithmetic operations, tens of ns. With
// several worker threads deciding on one gate, a std::mutex that finds the lock taken puts the
// thread to sleep in the kernel and wakes it with a system call, each costing far more than the
// section itself, so two threads ran a keyed throttle slower than one. This lock spins briefly
// (test and test-and-set, with the CPU's pause hint) and gives its time slice away only when the
// holder does not come back quickly (it may have been descheduled). Uncontended, it costs one
// atomic exchange and one store. Meets BasicLockable and Lockable (std::lock_guard, unique_lock).
#pragma once

#include <atomic>
#include <thread>

namespace rc::detail {

/// The CPU's hint that the thread is spinning (x86 `pause`; nothing elsewhere): a spin loop's body.
inline void cpu_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class spin_mutex {
 public:
  void lock() noexcept {
    for (;;) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      for (unsigned spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins < max_spins)
          cpu_pause();
        else
          std::this_thread::yield();
      }
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  static constexpr unsigned max_spins = 256;
  std::atomic<bool> locked_{false};
};

}  // namespace rc::detail
