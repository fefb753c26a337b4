#include "rc/clock.hpp"

#include <cassert>
#include <thread>
#include <utility>

namespace rc {

cancel_signal::~cancel_signal() {
  // A signal must outlive its waits; firing detaches them all, so fire on the way out. A retired
  // one (deadline_scope::disarm) has nothing left to detach and nobody left to race with.
  if (retired_) return;
  fire();
  // Deadlines still linked below (their scopes outlive this signal) forget it.
  std::lock_guard lock(owner_->mutex_);
  for (cancel_signal* c = std::exchange(first_child_, nullptr); c != nullptr;) {
    cancel_signal* next = c->next_sibling_;
    c->parent_ = c->prev_sibling_ = c->next_sibling_ = nullptr;
    c = next;
  }
}

void cancel_signal::on_fire(std::function<void()> f) {
  {
    std::lock_guard lock(owner_->mutex_);
    if (!fired_.load(std::memory_order_relaxed)) {
      callbacks_.push_back(std::move(f));
      return;
    }
  }
  f();
}

void cancel_signal::fire() {
  // Waits are detached and handed to the executor a chunk at a time. With 100,000 exchanges
  // parked on a route's intake, detaching them all before resuming the first delayed the start
  // of a shutdown by 10-20 ms (rc-bench inflight: stop must begin within 10 ms). Once fired_ is
  // set no wait can join the list, so the loop ends.
  //
  // fire() still returns only once every wait is detached, also when another thread fired
  // first (the destructor relies on it). The owner is read once: after the last chunk is
  // detached, *this may be destroyed by whoever was waiting for that.
  scheduler* const owner = owner_;
  constexpr std::size_t chunk = 256;
  std::vector<std::coroutine_handle<>> woken;
  std::vector<std::function<void()>> callbacks;
  bool more = false;
  {
    std::unique_lock lock(owner->mutex_);
    if (fired_.load(std::memory_order_relaxed)) {
      while (detaching_) {  // rare: two threads firing at once
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      }
      return;
    }
    fired_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
    // Linked signals (deadlines below this one) fire with it, in one go: they hold the waits of
    // a single exchange, not a route's backlog.
    for (cancel_signal* c = first_child_; c != nullptr; c = c->next_sibling_)
      owner->fire_locked(*c, by_deadline_, woken, callbacks);
    // Most signals (a request's client timeout, a finished exchange's) are fired with nobody
    // waiting: then this was the last access to *this.
    more = head_ != nullptr;
    detaching_ = more;
  }
  for (auto h : woken) owner->resume(h);
  // On the stack and left uninitialised: a heap buffer per fire (or zeroing 256 handles) was a
  // measurable share of an rc-sim run, where every request fires two signals.
  void* batch[chunk];
  while (more) {
    std::size_t n = 0;
    {
      std::lock_guard lock(owner->mutex_);
      while (n < chunk && head_ != nullptr) {
        timer_wait* w = head_;
        owner->heap_remove(w);
        owner->unlink_signals(w);
        w->result = wait_result::cancelled;
        batch[n++] = w->waiter.address();
      }
      more = head_ != nullptr;
      if (!more) detaching_ = false;  // the last access to *this
    }
    for (std::size_t i = 0; i < n; ++i) owner->resume(std::coroutine_handle<>::from_address(batch[i]));
  }
  for (auto& f : callbacks) f();
}

void scheduler::fire_locked(cancel_signal& s, bool by_deadline, std::vector<std::coroutine_handle<>>& woken,
                            std::vector<std::function<void()>>& callbacks) {
  if (s.fired_.load(std::memory_order_relaxed)) return;
  s.by_deadline_ = by_deadline;
  s.fired_.store(true, std::memory_order_release);
  while (timer_wait* w = s.head_) {
    heap_remove(w);
    unlink_signals(w);
    w->result = wait_result::cancelled;
    woken.push_back(w->waiter);
  }
  for (auto& f : s.callbacks_) callbacks.push_back(std::move(f));
  s.callbacks_.clear();
  for (cancel_signal* c = s.first_child_; c != nullptr; c = c->next_sibling_)
    fire_locked(*c, by_deadline, woken, callbacks);
}

deadline_scope::deadline_scope(scheduler& s, cancel_signal* parent, time_point due) : sched_(s), signal_(s) {
  timer_.due = due;
  timer_.fires = &signal_;
  timer_.result = wait_result::cancelled;  // fire_due sets elapsed
  std::lock_guard lock(s.mutex_);
  if (parent) {
    assert(parent->owner_ == &s);
    if (parent->fired_.load(std::memory_order_relaxed)) {
      // Nothing waits on or listens to the new signal yet: firing it is just the flags.
      signal_.by_deadline_ = parent->by_deadline_;
      signal_.fired_.store(true, std::memory_order_release);
    } else {
      signal_.parent_ = parent;
      signal_.next_sibling_ = parent->first_child_;
      if (parent->first_child_) parent->first_child_->prev_sibling_ = &signal_;
      parent->first_child_ = &signal_;
    }
  }
  if (signal_.fired_.load(std::memory_order_relaxed)) return;
  timer_.sequence = s.sequence_++;
  s.heap_push(&timer_);
  if (s.heap_.front() == &timer_) s.earliest_changed(due);
}

bool deadline_scope::disarm() {
  if (!armed_) return expired_;
  armed_ = false;
  std::vector<std::coroutine_handle<>> woken;
  std::vector<std::function<void()>> dropped;
  {
    std::lock_guard lock(sched_.mutex_);
    if (timer_.heap_index != static_cast<std::size_t>(-1)) sched_.heap_remove(&timer_);
    expired_ = timer_.result == wait_result::elapsed;
    if (cancel_signal* p = signal_.parent_) {
      (signal_.prev_sibling_ ? signal_.prev_sibling_->next_sibling_ : p->first_child_) = signal_.next_sibling_;
      if (signal_.next_sibling_) signal_.next_sibling_->prev_sibling_ = signal_.prev_sibling_;
      signal_.parent_ = signal_.prev_sibling_ = signal_.next_sibling_ = nullptr;
    }
    // Whatever still waits on the signal (the work normally ends first) is woken as cancelled;
    // callbacks are let go without being called: nothing was aborted.
    while (timer_wait* w = signal_.head_) {
      sched_.heap_remove(w);
      sched_.unlink_signals(w);
      w->result = wait_result::cancelled;
      woken.push_back(w->waiter);
    }
    dropped.swap(signal_.callbacks_);
    // Signals linked below this one are disarmed by their own scopes first (they are nested).
    assert(signal_.first_child_ == nullptr);
    if (!signal_.fired_.load(std::memory_order_relaxed)) signal_.fired_.store(true, std::memory_order_release);
    signal_.retired_ = true;
  }
  for (auto h : woken) sched_.resume(h);
  return expired_;
}

deadline_scope::~deadline_scope() { disarm(); }

bool scheduler::try_complete_now(timer_wait& node, bool signals_only) {
  for (auto* s : node.signals)
    if (s && s->fired()) {
      node.result = wait_result::cancelled;
      return true;
    }
  if (!signals_only && node.due <= now()) {
    node.result = wait_result::elapsed;
    return true;
  }
  return false;
}

bool scheduler::enqueue(timer_wait& node, std::coroutine_handle<> h) {
  std::lock_guard lock(mutex_);
  for (auto* s : node.signals)
    if (s && s->fired_.load(std::memory_order_relaxed)) {
      node.result = wait_result::cancelled;
      return false;  // resume at once
    }
  node.waiter = h;
  node.sequence = sequence_++;
  for (int i = 0; i < 2; ++i) {
    cancel_signal* s = node.signals[i];
    if (!s) continue;
    // Append to the signal's list (oldest first); a node links on slot i for signals[i].
    node.next[i] = nullptr;
    node.prev[i] = s->tail_;
    if (s->tail_) {
      int j = s->tail_->signals[0] == s ? 0 : 1;
      s->tail_->next[j] = &node;
    } else {
      s->head_ = &node;
    }
    s->tail_ = &node;
  }
  heap_push(&node);
  if (heap_.front() == &node) earliest_changed(node.due);
  return true;
}

void scheduler::reschedule(timer_wait& node, time_point due) {
  std::lock_guard lock(mutex_);
  if (node.heap_index == static_cast<std::size_t>(-1)) {
    if (node.waiter == nullptr) node.due = due;  // not suspended yet: enqueue will read it
    return;
  }
  node.due = due;
  node.sequence = sequence_++;
  sift_up(node.heap_index);
  sift_down(node.heap_index);
  earliest_changed(heap_.front()->due);
}

void scheduler::unlink_signals(timer_wait* w) {
  for (int i = 0; i < 2; ++i) {
    cancel_signal* s = w->signals[i];
    if (!s) continue;
    if (w->prev[i]) {
      timer_wait* p = w->prev[i];
      p->next[p->signals[0] == s ? 0 : 1] = w->next[i];
    } else {
      s->head_ = w->next[i];
    }
    if (w->next[i]) {
      timer_wait* n = w->next[i];
      n->prev[n->signals[0] == s ? 0 : 1] = w->prev[i];
    } else {
      s->tail_ = w->prev[i];
    }
    w->prev[i] = w->next[i] = nullptr;
  }
}

void scheduler::forget(timer_wait& node) noexcept {
  std::lock_guard lock(mutex_);
  if (node.heap_index == static_cast<std::size_t>(-1)) return;
  heap_remove(&node);
  unlink_signals(&node);
}

std::size_t scheduler::fire_due(time_point limit, bool one) {
  std::vector<std::coroutine_handle<>> woken;
  std::vector<std::function<void()>> callbacks;
  std::size_t fired = 0;
  {
    std::lock_guard lock(mutex_);
    while (!heap_.empty() && heap_.front()->due <= limit) {
      timer_wait* w = heap_.front();
      heap_remove(w);
      unlink_signals(w);
      w->result = wait_result::elapsed;
      ++fired;
      // A deadline fires its signal here, under the lock, so that its scope, which disarms
      // under the same lock, never sees a half-fired signal (and may free it right after).
      if (w->fires)
        fire_locked(*w->fires, true, woken, callbacks);
      else
        woken.push_back(w->waiter);
      if (one) break;
    }
    if (!heap_.empty()) earliest_changed(heap_.front()->due);
  }
  for (auto h : woken) resume(h);
  for (auto& f : callbacks) f();
  return fired;
}

std::size_t scheduler::pending() const {
  std::lock_guard lock(mutex_);
  return heap_.size();
}

time_point scheduler::next_due() const {
  std::lock_guard lock(mutex_);
  return heap_.empty() ? time_point::max() : heap_.front()->due;
}

void scheduler::heap_push(timer_wait* w) {
  w->heap_index = heap_.size();
  heap_.push_back(w);
  sift_up(w->heap_index);
}

void scheduler::heap_remove(timer_wait* w) {
  const std::size_t i = w->heap_index;
  assert(i < heap_.size() && heap_[i] == w);
  timer_wait* last = heap_.back();
  heap_.pop_back();
  w->heap_index = static_cast<std::size_t>(-1);
  if (last == w) return;
  heap_[i] = last;
  last->heap_index = i;
  sift_up(i);
  sift_down(last->heap_index);
}

void scheduler::sift_up(std::size_t i) {
  while (i > 0) {
    std::size_t parent = (i - 1) / 2;
    if (!earlier(heap_[i], heap_[parent])) break;
    std::swap(heap_[i], heap_[parent]);
    heap_[i]->heap_index = i;
    heap_[parent]->heap_index = parent;
    i = parent;
  }
}

void scheduler::sift_down(std::size_t i) {
  const std::size_t n = heap_.size();
  for (;;) {
    std::size_t smallest = i, l = 2 * i + 1, r = l + 1;
    if (l < n && earlier(heap_[l], heap_[smallest])) smallest = l;
    if (r < n && earlier(heap_[r], heap_[smallest])) smallest = r;
    if (smallest == i) return;
    std::swap(heap_[i], heap_[smallest]);
    heap_[i]->heap_index = i;
    heap_[smallest]->heap_index = smallest;
    i = smallest;
  }
}

time_point manual_clock::now() const { return now_.load(std::memory_order_acquire); }

void manual_clock::set_now(time_point t) {
  std::lock_guard lock(mutex_);
  if (t > now_.load(std::memory_order_relaxed)) now_.store(t, std::memory_order_release);
}

bool manual_clock::fire_next(time_point limit) {
  {
    std::lock_guard lock(mutex_);
    // A wait until time_point::max() is "until cancelled" (a direct endpoint serving until its
    // route stops): virtual time never jumps there.
    if (!has_pending_locked() || next_due_locked() > limit || next_due_locked() == time_point::max()) return false;
    now_.store(std::max(now_.load(std::memory_order_relaxed), next_due_locked()), std::memory_order_release);
  }
  return fire_due(now(), true) > 0;
}

}  // namespace rc
