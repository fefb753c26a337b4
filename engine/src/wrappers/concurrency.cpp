#include "rc/wrappers/concurrency.hpp"

#include <mutex>
#include <optional>
#include <unordered_map>

#include "rc/clock.hpp"
#include "rc/route.hpp"

namespace rc {

void concurrency_options::validate() const {
  if (max < 1) invalid_option("concurrency", "max", "an integer >= 1", max);
  if (mode != concurrency_mode::queue && mode != concurrency_mode::reject)
    invalid_option("concurrency", "mode", "concurrency_mode::queue or concurrency_mode::reject",
                   static_cast<int>(mode));
  if (max_queue && mode == concurrency_mode::reject)
    invalid_option("concurrency", "max_queue", "left unset in reject mode", *max_queue);
  if (max_queue && *max_queue < 1) invalid_option("concurrency", "max_queue", "an integer >= 1", *max_queue);
  if (max_keys < 1 || max_keys > max_keys_limit)
    invalid_option("concurrency", "max_keys", "an integer in [1, 1000000]", max_keys);
}

namespace {

// A queued exchange's place in its pool's queue. Lives in the waiting coroutine's frame.
struct waiter {
  timer_wait* wait;  // its scheduler wait: due time::max() until a slot is handed to it
  waiter* prev = nullptr;
  waiter* next = nullptr;
  bool granted = false;  // a releasing exchange handed its slot over (set under the mutex)
  std::size_t in_use = 0;
};

// One bulkhead: slots in use and the FIFO queue of waiters.
struct pool {
  std::size_t in_use = 0;
  std::size_t waiting = 0;
  waiter* head = nullptr;
  waiter* tail = nullptr;
};

enum class verdict : std::uint8_t { acquired, queued, busy, queue_full, keys_full };

class concurrency_step final : public wrapper, public concurrency_gate {
 public:
  concurrency_step(concurrency_options o, std::unique_ptr<step> inner, rc::scope s)
      : wrapper(std::move(inner), s), options_(std::move(o)), max_(static_cast<std::size_t>(options_.max)) {}

  std::string_view wrapper_kind() const noexcept override { return "concurrency"; }

  concurrency_stats usage() const override {
    std::lock_guard lock(mutex_);
    concurrency_stats st;
    st.in_use = in_use_;
    st.queued = queued_;
    st.keys = keyed_.size();
    st.memory_bytes = memory_locked();
    return st;
  }
  keyed_gate_stats stats() const override {
    const auto u = usage();
    return {u.keys, u.memory_bytes};
  }

  // Reject mode never waits: around a synchronous step it needs no frame. Queue mode may wait.
  bool synchronous() const noexcept override {
    return options_.mode == concurrency_mode::reject && inner_ && inner_->synchronous();
  }

  outcome run_now(exchange& ex, route_runtime& rt) override {
    std::string key;
    if (options_.key) {
      try {
        key = options_.key(ex);
      } catch (...) {
        return outcome::failed(std::make_exception_ptr(selector_threw()));
      }
    }
    auto& bus = rt.events();
    std::size_t in_use = 0;
    const verdict v = try_acquire(key, nullptr, in_use);
    if (v != verdict::acquired) return refuse(ex, rt, key, v);
    slot_guard guard(this, &key, &rt.clock());
    const bool timed = bus.listening(event_id::concurrency_released);
    const time_point acquired_at = timed ? rt.now() : time_point{};
    emit_acquired(ex, rt, key, duration::zero(), in_use);
    outcome o = run_inner_now(ex, rt);
    guard.release();
    emit_released(ex, rt, key, acquired_at);
    return o;
  }

  // Queue mode with a free slot around a synchronous step: acquire, run, release now, as run()
  // would without waiting. Keyed: left to run(), so the selector runs once per exchange.
  bool try_run_now(exchange& ex, route_runtime& rt, outcome& out) override {
    if (options_.key || !inner_is_sync()) return false;
    std::string key;
    std::size_t in_use = 0;
    if (try_acquire(key, nullptr, in_use) != verdict::acquired) return false;  // nothing taken
    auto& bus = rt.events();
    slot_guard guard(this, &key, &rt.clock());
    const bool timed = bus.listening(event_id::concurrency_released);
    const time_point acquired_at = timed ? rt.now() : time_point{};
    emit_acquired(ex, rt, key, duration::zero(), in_use);
    out = run_inner_now(ex, rt);
    guard.release();
    emit_released(ex, rt, key, acquired_at);
    return true;
  }

  task<outcome> run(exchange& ex, route_runtime& rt) override {
    std::string key;
    if (options_.key) {
      try {
        key = options_.key(ex);
      } catch (...) {
        co_return outcome::failed(std::make_exception_ptr(
            error(errc::misconfigured,
                  "concurrency({ key }) selector threw; it must return a string for every exchange (" +
                      message_of(std::current_exception()) + ")",
                  false, std::current_exception())));
      }
    }
    auto& bus = rt.events();
    const bool timed = bus.listening(event_id::concurrency_acquired) || bus.listening(event_id::concurrency_released);
    const time_point arrived = timed ? rt.now() : time_point{};

    std::size_t in_use = 0;
    verdict v = try_acquire(key, nullptr, in_use);
    // A queued exchange needs a scheduler wait in its frame, so that a releasing exchange can
    // hand it the slot (reschedule). Built only then, and the decision is taken again with it.
    std::optional<scheduler::wait_awaiter> wait;
    waiter node{nullptr};
    if (v == verdict::queued) {
      wait.emplace(rt.clock().wait_queued(&rt.intake(), ex.abort_signal()));
      node.wait = &wait->node;
      v = try_acquire(key, &node, in_use);
    }
    if (v == verdict::busy || v == verdict::queue_full || v == verdict::keys_full) co_return refuse(ex, rt, key, v);
    if (v == verdict::queued) {
      bus.emit(event_id::concurrency_queued, [&] {
        auto j = with_key(identity(ex, rt, options_.label), key);
        j["queueDepth"] = in_use;  // try_acquire reports the depth for a queued exchange
        return j;
      });
      const wait_result r = co_await wait->by_ref();
      const bool shutdown = rt.intake().fired();
      if (!settle_wait(key, node, r == wait_result::elapsed || shutdown, rt.clock(), in_use)) {
        cancel_signal* a = ex.abort_signal();
        if (a != nullptr && a->deadline_passed())
          co_return outcome::failed(std::make_exception_ptr(
              error(errc::timed_out, "deadline passed while waiting for a concurrency slot", true)));
        co_return outcome::dropped("client-gone");
      }
    }

    // The slot is held from here: the guard gives it back however this frame ends.
    slot_guard guard(this, &key, &rt.clock());
    const time_point acquired_at = timed ? rt.now() : time_point{};
    emit_acquired(ex, rt, key, acquired_at - arrived, in_use);
    outcome o;
    if (inner_is_sync())
      o = run_inner_now(ex, rt);
    else
      o = co_await run_inner(ex, rt);
    guard.release();
    emit_released(ex, rt, key, acquired_at);
    co_return o;
  }

 private:
  error selector_threw() const {
    return error(errc::misconfigured,
                 "concurrency({ key }) selector threw; it must return a string for every exchange (" +
                     message_of(std::current_exception()) + ")",
                 false, std::current_exception());
  }

  outcome refuse(const exchange& ex, route_runtime& rt, const std::string& key, verdict v) const {
    const char* reason = v == verdict::queue_full ? "queue-full" : "busy";
    rt.events().emit(event_id::concurrency_rejected, [&] {
      auto j = with_key(identity(ex, rt, options_.label), key);
      j["reason"] = reason;
      return j;
    });
    return outcome::failed(std::make_exception_ptr(rejection(key, v, reason)));
  }

  void emit_acquired(const exchange& ex, route_runtime& rt, const std::string& key, duration waited,
                     std::size_t in_use) const {
    rt.events().emit(event_id::concurrency_acquired, [&] {
      auto j = with_key(identity(ex, rt, options_.label), key);
      j["waited"] = to_ms(waited);
      j["inUse"] = in_use;
      return j;
    });
  }

  void emit_released(const exchange& ex, route_runtime& rt, const std::string& key, time_point acquired_at) const {
    rt.events().emit(event_id::concurrency_released, [&] {
      auto j = with_key(identity(ex, rt, options_.label), key);
      j["heldMs"] = to_ms(rt.now() - acquired_at);
      return j;
    });
  }

  struct slot_guard {
    concurrency_step* self;
    const std::string* key;
    scheduler* clock;
    slot_guard(concurrency_step* s, const std::string* k, scheduler* c) : self(s), key(k), clock(c) {}
    slot_guard(const slot_guard&) = delete;
    slot_guard& operator=(const slot_guard&) = delete;
    ~slot_guard() { release(); }
    void release() {
      if (self) std::exchange(self, nullptr)->release(*key, *clock);
    }
  };

  pool* pool_of(const std::string& key) {
    if (!options_.key) return &single_;
    auto it = keyed_.find(key);
    return it == keyed_.end() ? nullptr : &it->second;
  }

  /// Takes a free slot, or queues `node` (when given; without it, only reports `queued` and
  /// changes nothing), or refuses. `out` gets the slots in use after acquiring, or the queue
  /// depth after queuing.
  verdict try_acquire(const std::string& key, waiter* node, std::size_t& out) {
    std::lock_guard lock(mutex_);
    pool* p = &single_;
    if (options_.key) {
      auto it = keyed_.find(key);
      if (it == keyed_.end()) {
        if (keyed_.size() >= options_.max_keys) return verdict::keys_full;
        it = keyed_.try_emplace(key).first;
      }
      p = &it->second;
    }
    if (p->in_use < max_ && p->head == nullptr) {
      out = ++p->in_use;
      ++in_use_;
      return verdict::acquired;
    }
    if (options_.mode == concurrency_mode::reject) return verdict::busy;
    if (options_.max_queue && p->waiting >= static_cast<std::size_t>(*options_.max_queue)) return verdict::queue_full;
    if (!node) return verdict::queued;
    node->prev = p->tail;
    (p->tail ? p->tail->next : p->head) = node;
    p->tail = node;
    out = ++p->waiting;
    ++queued_;
    return verdict::queued;
  }

  /// The queued exchange woke. Returns true when it holds a slot: one was handed to it, or the
  /// route is shutting down (`admit`: admitted over the limit). Otherwise it has left the queue
  /// (abort), giving back a slot handed to it meanwhile.
  bool settle_wait(const std::string& key, waiter& node, bool admit, scheduler& clock, std::size_t& in_use) {
    std::unique_lock lock(mutex_);
    pool* p = pool_of(key);  // never null: a pool with waiters or slots in use is kept
    if (node.granted) {
      in_use = node.in_use;
      if (admit) return true;
      lock.unlock();
      release(key, clock);
      return false;
    }
    (node.prev ? node.prev->next : p->head) = node.next;
    (node.next ? node.next->prev : p->tail) = node.prev;
    node.prev = node.next = nullptr;
    --p->waiting;
    --queued_;
    if (!admit) {
      forget_if_idle(key, p);
      return false;
    }
    in_use = ++p->in_use;
    ++in_use_;
    return true;
  }

  /// Gives a slot back: straight to the head of the queue if anyone waits.
  void release(const std::string& key, scheduler& clock) {
    std::lock_guard lock(mutex_);
    pool* p = pool_of(key);
    if (p == nullptr) return;  // cannot happen: a pool with slots in use is kept
    if (waiter* w = p->head) {
      p->head = w->next;
      (p->head ? p->head->prev : p->tail) = nullptr;
      w->next = nullptr;
      w->granted = true;
      w->in_use = p->in_use;
      --p->waiting;
      --queued_;
      clock.reschedule(*w->wait, clock.now());
      return;
    }
    --p->in_use;
    --in_use_;
    forget_if_idle(key, p);
  }

  void forget_if_idle(const std::string& key, pool* p) {
    if (!options_.key || p->in_use != 0 || p->waiting != 0) return;
    keyed_.erase(key);
    // The last key gone: let the bucket array go too, so an idle gate holds no memory.
    if (keyed_.empty()) std::unordered_map<std::string, pool>().swap(keyed_);
  }

  std::size_t memory_locked() const {
    std::size_t bytes = keyed_.bucket_count() > 1 ? keyed_.bucket_count() * sizeof(void*) : 0;
    for (const auto& [k, p] : keyed_) {
      bytes += sizeof(std::pair<const std::string, pool>) + 2 * sizeof(void*);
      if (k.capacity() > 15) bytes += k.capacity() + 1;
    }
    return bytes;
  }

  // A rejection's RC5026, its message and details built when first read (load shed is mostly let
  // go unread). It copies what it names: the error may outlive the bulkhead.
  struct rejection_fields {
    verdict v;
    const char* reason;  // a literal
    std::size_t max;
    std::size_t max_keys;
    long long max_queue;
    bool keyed;
    std::string key;
    std::string label;

    std::string message() const {
      std::string msg;
      if (v == verdict::keys_full)
        msg = fmt::format("concurrency rejected the exchange: all {} keys are busy (max_keys)", max_keys);
      else if (v == verdict::queue_full)
        msg = fmt::format("concurrency rejected the exchange: the queue is full ({} waiting)", max_queue);
      else
        msg = fmt::format("concurrency rejected the exchange: all {} slots are in use", max);
      if (keyed) msg += fmt::format(" for key \"{}\"", key);
      return msg;
    }
    nlohmann::json details() const {
      nlohmann::json details = {{"gate", "concurrency"}, {"reason", reason}, {"max", max}};
      if (keyed) details["key"] = key;
      if (!label.empty()) details["label"] = label;
      return details;
    }
  };

  error rejection(const std::string& key, verdict v, const char* reason) const {
    return deferred_error(errc::concurrency_limited, true,
                          rejection_fields{.v = v,
                                           .reason = reason,
                                           .max = max_,
                                           .max_keys = options_.max_keys,
                                           .max_queue = options_.max_queue.value_or(0),
                                           .keyed = static_cast<bool>(options_.key),
                                           .key = options_.key ? key : std::string(),
                                           .label = options_.label});
  }

  nlohmann::json with_key(nlohmann::json j, const std::string& key) const {
    if (options_.key) j["key"] = key;
    return j;
  }

  concurrency_options options_;
  std::size_t max_;
  mutable std::mutex mutex_;  // pools and counters: routes may run on several threads
  pool single_;
  std::unordered_map<std::string, pool> keyed_;  // keys with slots in use or waiters only
  std::size_t in_use_ = 0;
  std::size_t queued_ = 0;
};

}  // namespace

std::unique_ptr<step> make_concurrency(concurrency_options options, std::unique_ptr<step> inner, scope s) {
  options.validate();
  return std::make_unique<concurrency_step>(std::move(options), std::move(inner), s);
}

}  // namespace rc
