#include "rc/wrappers/throttle.hpp"

#include <cmath>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "rc/gates/keyed_lru.hpp"
#include "rc/gates/token_bucket.hpp"
#include "rc/route.hpp"

namespace rc {

void throttle_options::validate() const {
  // Reference order: mode, rate, per, burst, max_keys. An enum holds a bad value only through a
  // cast (a config loader's int), which must not silently become a one-second window.
  if (mode != throttle_mode::delay && mode != throttle_mode::reject)
    invalid_option("throttle", "mode", "throttle_mode::delay or throttle_mode::reject", static_cast<int>(mode));
  if (!std::isfinite(rate) || rate <= 0) invalid_option("throttle", "rate", "a finite number > 0", rate);
  if (per != rc::per::second && per != rc::per::minute && per != rc::per::hour && per != rc::per::day)
    invalid_option("throttle", "per", "per::second, per::minute, per::hour or per::day", static_cast<int>(per));
  if (burst && (!std::isfinite(*burst) || *burst <= 0))
    invalid_option("throttle", "burst", "a finite number > 0", *burst);
  if (max_keys < 1 || max_keys > max_keys_limit)
    invalid_option("throttle", "max_keys", "an integer in [1, 1000000]", max_keys);
  if (max_wait && *max_wait < duration::zero())
    invalid_option("throttle", "max_wait", "a duration >= 0", ms_text(*max_wait));
  if (max_queue && mode == throttle_mode::reject)
    invalid_option("throttle", "max_queue", "left unset in reject mode", *max_queue);
  if (max_wait && mode == throttle_mode::reject)
    invalid_option("throttle", "max_wait", "left unset in reject mode", ms_text(*max_wait));
}

namespace {

struct keyed_bucket {
  token_bucket bucket;
  std::uint32_t waiters = 0;
};

// A waiting exchange's place in its bucket's queue. Lives in the waiting coroutine's frame.
struct queue_node {
  timer_wait* wait;  // the exchange's scheduler wait: due time::max() until it is the head
  queue_node* prev = nullptr;
  queue_node* next = nullptr;
};

// The exchanges waiting on one bucket, oldest first. Only the head has a due time; it is woken
// on the earliest outstanding ticket and, once admitted, hands the next ticket to the next node.
struct wait_queue {
  queue_node* head = nullptr;
  queue_node* tail = nullptr;
};

class throttle_step final : public wrapper {
 public:
  throttle_step(throttle_options o, std::unique_ptr<step> inner, rc::scope s)
      : wrapper(std::move(inner), s),
        options_(std::move(o)),
        params_(bucket_params::from(options_.rate, to_duration(options_.per), options_.burst)),
        table_(options_.max_keys) {}

  task<outcome> run(exchange& ex, route_runtime& rt) override {
    const time_point start = rt.now();
    std::string key;
    if (options_.key) {
      try {
        key = options_.key(ex);
      } catch (...) {
        co_return outcome::failed(std::make_exception_ptr(error(
            errc::misconfigured,
            "throttle({ key }) selector threw; it must return a string for every exchange (" +
                message_of(std::current_exception()) + ")",
            false, std::current_exception())));
      }
    }

    decision d = decide(key, rt.now(), nullptr);
    // An exchange that has to queue needs a scheduler wait kept in its frame, so that the
    // exchange ahead of it can wake it (reschedule) when it becomes the head. Built only then
    // (an unpaced pass stays cheap), and the decision is taken again with it.
    std::optional<scheduler::wait_awaiter> wait;
    queue_node node{nullptr};
    if (d.queued) {
      wait.emplace(rt.clock().wait_queued(&rt.intake(), ex.abort_signal()));
      node.wait = &wait->node;
      d = decide(key, rt.now(), &node);
    }
    if (!d.admitted) {
      emit_rejected(ex, rt, key, d.wait);
      co_return outcome::failed(std::make_exception_ptr(rejection(key, d.wait, d.why)));
    }
    if (!d.queued) {
      emit_passed(ex, rt, key, false, duration::zero());
      co_return co_await run_inner(ex, rt);
    }

    rt.events().emit(event_id::throttle_delayed, [&] {
      auto j = with_key(identity(ex, rt, options_.label), key);
      j["waitMs"] = to_ms(d.wait);
      return j;
    });
    if (co_await wait->by_ref() == wait_result::cancelled) {
      const bool client_gone = ex.abort_signal() && ex.abort_signal()->fired() && !rt.intake().fired();
      leave_queue(key, node, rt, client_gone);
      if (client_gone) co_return outcome::dropped("client-gone");
      // shutdown: admitted at once
    } else {
      admit_head(key, node, rt);
    }
    emit_passed(ex, rt, key, true, rt.now() - start);
    co_return co_await run_inner(ex, rt);
  }

 private:
  struct decision {
    bool admitted;
    duration wait;    // admitted: how long it is expected to wait; refused: retry after
    const char* why;  // refusal reason
    bool queued = false;  // admitted but must wait in the queue (even when wait is zero)
  };

  static bool idle(const keyed_bucket& b, time_point now, const bucket_params& p) {
    return b.waiters == 0 && b.bucket.is_full(now, p);
  }

  /// Admits, refuses or queues. Without a node it only reports that the exchange would queue
  /// (queued = true) and changes nothing.
  decision decide(const std::string& key, time_point now, queue_node* node) {
    std::lock_guard lock(mutex_);
    keyed_bucket* b = &single_;
    if (options_.key) {
      b = table_.touch(key, [&](const keyed_bucket& s) { return idle(s, now, params_); });
      if (!b) {
        // Every evictable candidate is busy: refuse rather than meter this key with nothing.
        return {false, std::chrono::duration_cast<duration>(std::chrono::duration<double, std::nano>(params_.interval_ns)),
                "key table full"};
      }
    }
    if (options_.mode == throttle_mode::reject) {
      const auto r = b->bucket.try_acquire(now, params_);
      return {r.admitted, r.retry_after, "rate limit exceeded"};
    }
    // Behind waiters, a newcomer always queues, even if the bucket's refill says a token is
    // ready: that happens only when the queue is overdue (a stall), and the queue goes first.
    const bool behind = b->waiters > 0;
    const duration wait = behind ? b->bucket.peek_enqueue(now, params_) : b->bucket.peek_wait(now, params_);
    if (!behind && wait == duration::zero()) {
      b->bucket.reserve(now, params_);
      return {true, wait, nullptr};
    }
    if (options_.max_wait && wait > *options_.max_wait) return {false, wait, "wait would exceed max_wait"};
    if (options_.max_queue && waiting_ >= *options_.max_queue) return {false, wait, "queue is full (max_queue)"};
    if (!node) return {true, wait, nullptr, true};
    wait_queue& q = queue_of(b);
    if (behind) {
      b->bucket.enqueue(now, params_);
      node->prev = q.tail;
      q.tail->next = node;
      q.tail = node;
    } else {
      b->bucket.reserve(now, params_);
      q.head = q.tail = node;
      node->wait->due = now + wait;  // not suspended yet: nobody else can see this wait
    }
    ++b->waiters;
    ++waiting_;
    return {true, wait, nullptr, true};
  }

  keyed_bucket* bucket_of(const std::string& key) {
    // A bucket with waiters is never evicted, so a waiter always finds its own.
    return options_.key ? table_.find(key) : &single_;
  }

  wait_queue& queue_of(const keyed_bucket* b) { return b == &single_ ? single_queue_ : queues_[b]; }

  /// Unlinks a node; when it was the head, wakes the next one on the earliest outstanding ticket.
  void unlink(keyed_bucket& b, queue_node& node, scheduler& clock, time_point now) {
    wait_queue& q = queue_of(&b);
    const bool was_head = q.head == &node;
    (node.prev ? node.prev->next : q.head) = node.next;
    (node.next ? node.next->prev : q.tail) = node.prev;
    --b.waiters;
    --waiting_;
    if (q.head == nullptr) {
      if (&b != &single_) queues_.erase(&b);
    } else if (was_head) {
      clock.reschedule(*q.head->wait, now + b.bucket.head_wait(now, b.waiters, params_));
    }
  }

  /// The head's wait elapsed: it goes on the earliest outstanding ticket. Woken a whole interval
  /// or more late (a stall), the queue moves later instead of releasing the missed tickets at once
  /// (token_bucket::admit_head).
  void admit_head(const std::string& key, queue_node& node, route_runtime& rt) {
    std::lock_guard lock(mutex_);
    keyed_bucket* b = bucket_of(key);
    if (!b) return;  // cannot happen (see bucket_of)
    const time_point now = rt.now();
    b->bucket.admit_head(now, b->waiters, params_);
    unlink(*b, node, rt.clock(), now);
  }

  /// A waiting exchange leaves the queue without its ticket: shutdown admits it at once (its
  /// ticket is spent), or its client went away and the ticket goes back. The exchanges behind
  /// it then move up one ticket each, since they take tickets in order as they reach the head.
  void leave_queue(const std::string& key, queue_node& node, route_runtime& rt, bool client_gone) {
    std::lock_guard lock(mutex_);
    keyed_bucket* b = bucket_of(key);
    if (!b) return;  // cannot happen (see bucket_of)
    const time_point now = rt.now();
    if (client_gone) b->bucket.give_back(now, params_);
    unlink(*b, node, rt.clock(), now);
  }

  error rejection(const std::string& key, duration retry_after, const char* why) const {
    const double ms = to_ms(retry_after);
    std::string msg = "throttle rejected the exchange: ";
    msg += why;
    if (options_.key) msg += fmt::format(" for key \"{}\"", key);
    msg += fmt::format(". Retry after ~{}ms.", static_cast<long long>(std::ceil(ms)));
    nlohmann::json details = {{"gate", "throttle"}, {"retry_after_ms", ms}};
    if (options_.key) details["key"] = key;
    if (!options_.label.empty()) details["label"] = options_.label;
    return error(errc::rate_limited, std::move(msg), true, nullptr, std::move(details));
  }

  nlohmann::json with_key(nlohmann::json j, const std::string& key) const {
    if (options_.key) j["key"] = key;
    return j;
  }

  void emit_passed(const exchange& ex, route_runtime& rt, const std::string& key, bool waited, duration elapsed) {
    rt.events().emit(event_id::throttle_passed, [&] {
      auto j = with_key(identity(ex, rt, options_.label), key);
      j["waited"] = waited;
      j["elapsed"] = to_ms(elapsed);
      return j;
    });
  }

  void emit_rejected(const exchange& ex, route_runtime& rt, const std::string& key, duration retry_after) {
    rt.events().emit(event_id::throttle_rejected, [&] {
      auto j = with_key(identity(ex, rt, options_.label), key);
      j["retryAfterMs"] = to_ms(retry_after);
      return j;
    });
  }

  throttle_options options_;
  bucket_params params_;
  std::mutex mutex_;  // the bucket(s) and counters: routes may run on several threads
  keyed_bucket single_;
  wait_queue single_queue_;
  keyed_lru<keyed_bucket> table_;
  std::unordered_map<const keyed_bucket*, wait_queue> queues_;  // keyed buckets with waiters only
  std::size_t waiting_ = 0;
};

}  // namespace

std::unique_ptr<step> make_throttle(throttle_options options, std::unique_ptr<step> inner, scope s) {
  options.validate();
  return std::make_unique<throttle_step>(std::move(options), std::move(inner), s);
}

}  // namespace rc
