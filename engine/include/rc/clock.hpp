// The clock seam: the only place the engine learns the time or waits.
//
// A `scheduler` keeps every pending wait in one indexed min-heap ordered by (due time,
// registration order), so ties resolve in arrival order and removal is O(log n). A wait can be
// tied to up to two `cancel_signal`s (a route's intake, an exchange's abort); firing a signal
// wakes its waits at once in O(waits on that signal). Resumption is handed to the executor
// (`set_executor`), never run on the thread that fired a signal.
//
// Two clocks: `manual_clock` (tests, rc-sim) whose time moves only when told, and the steady
// clock that the context builds on Asio (context.cpp). Nothing else reads a clock or sleeps.
//
// Wall time (the calendar, UTC) is a view of engine time through one offset: to_wall(t) =
// t + wall_offset(). The manual clock's offset is fixed (0 by default, so virtual time starts at
// 1970-01-01T00:00:00Z; set_wall_time picks another start) and moves only with set_wall_time. The
// steady clock's offset is re-read from the system clock at each call, so a wall-clock jump
// (NTP step, manual change) shows in the next conversion; waits stay on the monotonic clock. A
// calendar schedule converts its next wall instant to engine time, sleeps until then, and checks
// the wall clock again when it wakes.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "rc/time.hpp"

namespace rc {

class scheduler;
struct timer_wait;

enum class wait_result : std::uint8_t { elapsed, cancelled };

/// A one-shot signal that cuts waits short: a route's intake (stop), an exchange's abort (client
/// gone). Thread-safe. Fire is idempotent.
class cancel_signal {
 public:
  explicit cancel_signal(scheduler& owner) noexcept : owner_(&owner) {}
  cancel_signal(const cancel_signal&) = delete;
  cancel_signal& operator=(const cancel_signal&) = delete;
  ~cancel_signal();

  void fire();
  bool fired() const noexcept { return fired_.load(std::memory_order_acquire); }
  /// Calls `f` once when fired (at once if already fired). Used by components that must react to
  /// a cancellation outside a wait (close a socket, abandon a request). Not for hot paths.
  void on_fire(std::function<void()> f);
  /// Fired because a deadline passed (a deadline_scope's own, or one it inherited from the
  /// signal it is linked to), not because the client went away. Valid once fired() is true.
  bool deadline_passed() const noexcept { return fired() && by_deadline_; }

 private:
  friend class scheduler;
  friend class deadline_scope;
  scheduler* owner_;
  // Written under owner_->mutex_; read without it by fired(), which sources and gates call for
  // every exchange (a lock there was a measurable share of a synchronous run).
  std::atomic<bool> fired_{false};
  // Intrusive list of waits, oldest first, guarded by owner_->mutex_. fire() wakes from the head,
  // so a stop admits waiting exchanges in the order they started waiting (throttle FIFO holds).
  timer_wait* head_ = nullptr;
  timer_wait* tail_ = nullptr;
  bool detaching_ = false;  // fire() is still detaching waits; guarded by owner_->mutex_
  std::vector<std::function<void()>> callbacks_;
  // Signals linked below this one (deadline_scope): fired with it. Guarded by owner_->mutex_.
  cancel_signal* parent_ = nullptr;
  cancel_signal* first_child_ = nullptr;
  cancel_signal* prev_sibling_ = nullptr;
  cancel_signal* next_sibling_ = nullptr;
  bool by_deadline_ = false;  // written under owner_->mutex_ before fired_ (release)
  bool retired_ = false;      // disarmed by its deadline_scope: nothing can reach it any more
};

/// One pending wait. Lives in the awaiting coroutine's frame; never allocated on its own.
struct timer_wait {
  time_point due{};
  std::uint64_t sequence = 0;
  std::size_t heap_index = static_cast<std::size_t>(-1);
  std::coroutine_handle<> waiter;
  wait_result result = wait_result::elapsed;
  cancel_signal* signals[2] = {nullptr, nullptr};
  timer_wait* prev[2] = {nullptr, nullptr};
  timer_wait* next[2] = {nullptr, nullptr};
  /// When set, the wait resumes nobody: it fires this signal when due (deadline_scope).
  cancel_signal* fires = nullptr;
};

class scheduler {
 public:
  using executor_fn = std::function<void(std::coroutine_handle<>)>;

  virtual ~scheduler() = default;
  virtual time_point now() const = 0;
  /// now() at clock-tick resolution (coarse_resolution(), a few ms at most), for measuring work
  /// that cannot be interrupted where reading the precise clock per exchange costs too much.
  /// Exact (resolution zero) on the manual clock.
  virtual time_point coarse_now() const { return now(); }
  virtual duration coarse_resolution() const noexcept { return duration::zero(); }

  /// The wall-clock instant minus engine time, as of now (see the file comment).
  virtual duration wall_offset() const { return duration::zero(); }
  /// The wall-clock (UTC) instant at engine time `t`, with the current offset.
  wall_time to_wall(time_point t) const { return wall_time(t.time_since_epoch() + wall_offset()); }
  /// The engine time at which the wall clock reads `w`, with the current offset.
  time_point from_wall(wall_time w) const { return time_point(w.time_since_epoch() - wall_offset()); }
  wall_time wall_now() const { return to_wall(now()); }

  /// Where woken coroutines are resumed. Until set, they are resumed inline (pure engine tests).
  void set_executor(executor_fn fn) { executor_ = std::move(fn); }

  struct wait_awaiter {
    scheduler& sched;
    timer_wait node;
    bool queue_always = false;  // see wait_queued
    // A frame destroyed while it waits (a run abandoned by a forced stop) takes its wait out of
    // the heap and the signals' lists, which would otherwise point into freed memory.
    ~wait_awaiter() {
      if (node.heap_index != static_cast<std::size_t>(-1)) sched.forget(node);
    }
    bool await_ready() noexcept { return sched.try_complete_now(node, queue_always); }
    bool await_suspend(std::coroutine_handle<> h) { return sched.enqueue(node, h); }
    wait_result await_resume() const noexcept { return node.result; }

    /// `co_await w.by_ref()` waits on this very object, whose `node` someone else may hold (see
    /// wait_queued). Awaiting an awaiter reached through a reference (`co_await *optional`) let
    /// g++ 12 await a copy, so the node handed out was never queued.
    struct ref_awaiter {
      wait_awaiter* self;
      bool await_ready() noexcept { return self->await_ready(); }
      bool await_suspend(std::coroutine_handle<> h) { return self->await_suspend(h); }
      wait_result await_resume() const noexcept { return self->await_resume(); }
    };
    ref_awaiter by_ref() noexcept { return {this}; }
  };

  /// Waits until `due` or until one of the signals fires. A due time not after now() and a signal
  /// already fired both complete without suspending.
  wait_awaiter wait_until(time_point due, cancel_signal* a = nullptr, cancel_signal* b = nullptr) {
    wait_awaiter w{*this, {}};
    w.node.due = due;
    w.node.signals[0] = a;
    w.node.signals[1] = b;
    return w;
  }

  /// A wait whose due time someone else sets (reschedule), e.g. a queue that wakes its head:
  /// until then it waits for a signal only. Always queues, even if rescheduled into the past
  /// before it suspends. Keep the awaiter in a variable and hand `&awaiter.node` to the waker.
  wait_awaiter wait_queued(cancel_signal* a = nullptr, cancel_signal* b = nullptr) {
    wait_awaiter w = wait_until(time_point::max(), a, b);
    w.queue_always = true;
    return w;
  }

  /// Moves a wait to a new due time (O(log n)). A wait that has not suspended yet takes the new
  /// time when it does; one already woken or cancelled is left alone.
  void reschedule(timer_wait& node, time_point due);

  struct yield_awaiter {
    scheduler& sched;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) { sched.resume(h); }
    void await_resume() const noexcept {}
  };
  /// Goes to the back of the executor's ready queue (a zero wait that still lets others run).
  yield_awaiter yield() noexcept { return {*this}; }

  /// Number of pending waits (all routes).
  std::size_t pending() const;
  /// Due time of the earliest pending wait, or time_point::max() when none.
  time_point next_due() const;

 protected:
  /// The heap's top changed to `due` (called with the mutex held). The steady clock re-arms its
  /// timer here; the manual clock ignores it.
  virtual void earliest_changed(time_point /*due*/) {}
  /// Pops every wait due at or before `limit` (or only the first one when `one`), and hands each
  /// to the executor. Returns how many were woken.
  std::size_t fire_due(time_point limit, bool one);
  void resume(std::coroutine_handle<> h) {
    if (executor_)
      executor_(h);
    else
      h.resume();
  }

  bool has_pending_locked() const noexcept { return !heap_.empty(); }
  time_point next_due_locked() const noexcept { return heap_.front()->due; }

  mutable std::mutex mutex_;

 private:
  friend class cancel_signal;
  friend class deadline_scope;
  /// Fires `s` and the signals linked below it, with the mutex held: their waits are detached
  /// into `woken` and their callbacks moved into `callbacks`, both for the caller to run after
  /// unlocking.
  void fire_locked(cancel_signal& s, bool by_deadline, std::vector<std::coroutine_handle<>>& woken,
                   std::vector<std::function<void()>>& callbacks);
  bool try_complete_now(timer_wait& node, bool signals_only);
  bool enqueue(timer_wait& node, std::coroutine_handle<> h);
  void heap_push(timer_wait* w);
  void heap_remove(timer_wait* w);
  void sift_up(std::size_t i);
  void sift_down(std::size_t i);
  static bool earlier(const timer_wait* a, const timer_wait* b) noexcept {
    return a->due != b->due ? a->due < b->due : a->sequence < b->sequence;
  }
  void unlink_signals(timer_wait* w);
  void forget(timer_wait& node) noexcept;

  std::vector<timer_wait*> heap_;
  std::uint64_t sequence_ = 0;
  executor_fn executor_;
};

/// A deadline for one run of some work: a cancel_signal that fires when `due` passes or when
/// `parent` (the enclosing abort signal, may be null) fires, whichever comes first, so nested
/// deadlines resolve to the earliest and a client disconnect still reaches the work inside.
/// Lives in the frame of whoever runs the work; construction and destruction each take the
/// scheduler's lock once and allocate nothing. Destruction disarms: the timer goes, the link to
/// the parent goes, and waits or callbacks still registered on the signal are let go (a wait is
/// woken as cancelled; a callback is dropped, since nothing was aborted). Thread-safe against a
/// parent fired from another thread and against the timer firing at the same moment.
class deadline_scope {
 public:
  deadline_scope(scheduler& s, cancel_signal* parent, time_point due);
  deadline_scope(const deadline_scope&) = delete;
  deadline_scope& operator=(const deadline_scope&) = delete;
  ~deadline_scope();

  cancel_signal& signal() noexcept { return signal_; }
  /// Disarms now (the destructor then does nothing) and says whether this scope's own due time
  /// passed first (not only the parent's).
  bool disarm();

 private:
  scheduler& sched_;
  cancel_signal signal_;
  timer_wait timer_;
  bool armed_ = true;
  bool expired_ = false;
};

/// Virtual time for tests and rc-sim. Single-threaded: time moves only through advance_to/
/// fire_next, and everything due is resumed in (due, registration) order.
class manual_clock final : public scheduler {
 public:
  time_point now() const override;
  /// Sets now() forward (never back).
  void set_now(time_point t);
  /// Wakes the earliest wait if it is due at or before `limit`, moving now() to its due time.
  bool fire_next(time_point limit);
  /// Makes the wall clock read `w` at now(); later wall times follow engine time from there.
  void set_wall_time(wall_time w) noexcept { wall_offset_ = w.time_since_epoch() - now().time_since_epoch(); }
  duration wall_offset() const override { return wall_offset_; }

 private:
  // Written under the scheduler's mutex, read without it: now() is asked several times per
  // exchange (gates, steps, events), and a lock there was a measurable share of an rc-sim run.
  std::atomic<time_point> now_{};
  duration wall_offset_{};
};

}  // namespace rc
