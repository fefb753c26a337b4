// dedupe, sample, debounce, batch: see rc/shaping.hpp.
#include "rc/shaping.hpp"

#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "rc/context.hpp"
#include "rc/gates/keyed_lru.hpp"
#include "rc/route.hpp"

namespace rc {

namespace {

nlohmann::json identity(const route_runtime& rt, const exchange& ex) {
  return {{"routeId", rt.id()}, {"exchangeId", ex.id()}, {"correlationId", ex.correlation_id()}};
}

// A user's key function that throws fails the exchange with `code`, naming the operation.
std::string key_of(const key_selector& key, const exchange& ex, const char* op, errc code) {
  try {
    return key(ex);
  } catch (...) {
    throw error(code, fmt::format("{}(): the key function threw: {}", op, message_of(std::current_exception())), false,
                std::current_exception());
  }
}

}  // namespace

// ---- options ------------------------------------------------------------------------------

void dedupe_options::validate() const {
  if (ttl <= duration::zero()) invalid_option("dedupe", "ttl", "a duration > 0", ms_text(ttl));
  if (max_keys == 0 || max_keys > keyed_lru<int>::max_supported_keys)
    invalid_option("dedupe", "maxKeys", fmt::format("between 1 and {}", keyed_lru<int>::max_supported_keys), max_keys);
}

void sample_options::validate() const {
  if (interval < duration::zero()) invalid_option("sample", "interval", "a duration > 0", ms_text(interval));
  const bool by_count = every > 0;
  const bool by_time = interval > duration::zero();
  if (by_count && by_time)
    invalid_option("sample", "every | interval", "exactly one of the two",
                   fmt::format("both (every {}, interval {})", every, ms_text(interval)));
  if (!by_count && !by_time) invalid_option("sample", "every | interval", "exactly one of the two", "neither");
}

void debounce_options::validate() const {
  if (wait <= duration::zero()) invalid_option("debounce", "wait", "a duration > 0", ms_text(wait));
  if (max_wait < duration::zero() || (max_wait > duration::zero() && max_wait < wait))
    invalid_option("debounce", "maxWait", fmt::format("0 (no limit) or at least wait ({})", ms_text(wait)),
                   ms_text(max_wait));
}

void batch_options::validate() const {
  if (size == 0) invalid_option("batch", "size", "at least 1", size);
  if (flush_interval <= duration::zero())
    invalid_option("batch", "flushInterval", "a duration > 0", ms_text(flush_interval));
}

// ---- dedupe -------------------------------------------------------------------------------

std::string body_hash_key(const exchange& ex) {
  return fmt::format("{:016x}", std::hash<nlohmann::json>{}(ex.raw_body().to_json()));
}

namespace {

class dedupe_step final : public step {
 public:
  explicit dedupe_step(dedupe_options o) : options_(std::move(o)), table_(options_.max_keys) {}

  std::string_view operation() const override { return "dedupe"; }
  bool synchronous() const noexcept override { return true; }

  outcome run_now(exchange& ex, route_runtime& rt) override {
    std::string key = key_of(options_.key, ex, "dedupe", errc::dedupe_key);
    const time_point now = rt.now();
    std::uint64_t generation = 0;
    bool duplicate = false;
    bool again = false;  // the same exchange, run again by a retry around it
    std::string id = ex.id();
    {
      std::lock_guard lock(mutex_);
      // A key whose exchange is in flight stays: forgetting it would let a duplicate through.
      entry* e = table_.touch(key, [](const entry& s) { return s.state != held::reserved; });
      if (e == nullptr)
        throw error(errc::dedupe_full,
                    fmt::format("dedupe(): the key table is full ({} keys) and the least recently used keys are "
                                "all held by exchanges in flight",
                                options_.max_keys),
                    true);
      if (e->state == held::reserved && e->owner == id) {
        again = true;
      } else if (e->state == held::reserved || (e->state == held::committed && now < e->expires)) {
        duplicate = true;
      } else {
        e->state = held::reserved;
        e->generation = generation = ++generations_;
        e->owner = std::move(id);
      }
    }
    if (duplicate) {
      rt.events().emit(event_id::dedupe_duplicate, [&] {
        auto j = identity(rt, ex);
        j["key"] = key;
        return j;
      });
      return outcome::dropped("duplicate");
    }
    rt.events().emit(event_id::dedupe_passed, [&] {
      auto j = identity(rt, ex);
      j["key"] = key;
      return j;
    });
    if (again) return outcome::proceed();  // its finish hook is already registered
    ex.on_finish(
        [this, &rt, key = std::move(key), generation](bool succeeded) { settle(key, generation, succeeded, rt); });
    return outcome::proceed();
  }

 private:
  enum class held : std::uint8_t { free, reserved, committed };
  struct entry {
    held state = held::free;
    std::uint64_t generation = 0;
    time_point expires{};
    std::string owner;  // the id of the exchange holding the reservation
  };

  // The run that reserved `key` has ended: commit (remembered for ttl from now) or release.
  void settle(const std::string& key, std::uint64_t generation, bool succeeded, route_runtime& rt) {
    const time_point now = rt.now();
    std::lock_guard lock(mutex_);
    entry* e = table_.find(key);
    if (e == nullptr || e->generation != generation || e->state != held::reserved) return;
    e->owner.clear();
    if (succeeded) {
      e->state = held::committed;
      e->expires = now + options_.ttl;
      table_.touch(key, [](const entry&) { return false; });  // most recently committed: evicted last
    } else {
      e->state = held::free;
    }
  }

  dedupe_options options_;
  std::mutex mutex_;
  keyed_lru<entry> table_;
  std::uint64_t generations_ = 0;
};

// ---- sample -------------------------------------------------------------------------------

class sample_step final : public step {
 public:
  explicit sample_step(sample_options o) : options_(o) {}

  std::string_view operation() const override { return "sample"; }
  bool synchronous() const noexcept override { return true; }

  outcome run_now(exchange& ex, route_runtime& rt) override {
    bool pass;
    std::uint64_t seen;
    {
      std::lock_guard lock(mutex_);
      seen = ++seen_;
      if (options_.every > 0) {
        pass = seen % options_.every == 0;
      } else {
        const time_point now = rt.now();
        pass = !passed_any_ || now - last_pass_ >= options_.interval;
        if (pass) {
          passed_any_ = true;
          last_pass_ = now;
        }
      }
    }
    rt.events().emit(pass ? event_id::sample_passed : event_id::sample_dropped, [&] {
      auto j = identity(rt, ex);
      j["seen"] = seen;
      if (options_.every > 0)
        j["every"] = options_.every;
      else
        j["interval"] = to_ms(options_.interval);
      return j;
    });
    return pass ? outcome::proceed() : outcome::dropped("sampled");
  }

 private:
  sample_options options_;
  std::mutex mutex_;
  std::uint64_t seen_ = 0;
  bool passed_any_ = false;
  time_point last_pass_{};
};

// ---- debounce -----------------------------------------------------------------------------

class debounce_step final : public step {
 public:
  explicit debounce_step(debounce_options o) : options_(std::move(o)) {}

  std::string_view operation() const override { return "debounce"; }

  task<outcome> run(exchange& ex, route_runtime& rt) override {
    std::string key = options_.key ? key_of(options_.key, ex, "debounce", errc::step_failed) : std::string();
    auto me = std::make_shared<holder>(rt.clock());
    std::shared_ptr<holder> previous;
    time_point due;
    bool capped = false;  // released by max_wait rather than by quiet
    const time_point now = rt.now();
    {
      std::lock_guard lock(mutex_);
      auto [it, fresh] = bursts_.try_emplace(key);
      burst& b = it->second;
      if (fresh) b.started = now;
      previous = std::exchange(b.current, me);
      if (previous) previous->superseded = true;
      due = now + options_.wait;
      if (options_.max_wait > duration::zero() && b.started + options_.max_wait < due) {
        due = b.started + options_.max_wait;
        capped = true;
      }
    }
    // Outside the lock: a woken holder takes it again. The shared pointer keeps its signal alive
    // even if its run has already ended.
    if (previous) previous->signal.fire();
    rt.events().emit(event_id::debounce_held, [&] {
      auto j = identity(rt, ex);
      j["key"] = key;
      j["releaseAt"] = to_ms(due - now);
      return j;
    });
    co_await rt.clock().wait_until(due, &me->signal, &rt.intake());
    bool superseded;
    time_point started{};
    {
      std::lock_guard lock(mutex_);
      superseded = me->superseded;
      if (!superseded) {
        auto it = bursts_.find(key);
        started = it->second.started;
        bursts_.erase(it);  // the burst is over: the next arrival starts a new one
      }
    }
    if (superseded) {
      rt.events().emit(event_id::debounce_dropped, [&] {
        auto j = identity(rt, ex);
        j["key"] = key;
        return j;
      });
      co_return outcome::dropped("debounced");
    }
    rt.events().emit(event_id::debounce_released, [&] {
      auto j = identity(rt, ex);
      j["key"] = key;
      const bool stopping = rt.intake().fired() && rt.now() < due;
      j["reason"] = stopping ? "stop" : capped ? "maxWait" : "wait";
      j["burstMs"] = to_ms(rt.now() - started);
      return j;
    });
    co_return outcome::proceed();
  }

 private:
  struct holder {
    explicit holder(scheduler& s) : signal(s) {}
    cancel_signal signal;     // fired when a later arrival of the same key supersedes this one
    bool superseded = false;  // guarded by the step's mutex
  };
  struct burst {
    time_point started{};
    std::shared_ptr<holder> current;
  };

  debounce_options options_;
  std::mutex mutex_;
  std::unordered_map<std::string, burst> bursts_;  // only keys with an exchange held
};

}  // namespace

std::unique_ptr<step> make_dedupe(dedupe_options o) { return std::make_unique<dedupe_step>(std::move(o)); }
std::unique_ptr<step> make_sample(sample_options o) { return std::make_unique<sample_step>(o); }
std::unique_ptr<step> make_debounce(debounce_options o) { return std::make_unique<debounce_step>(std::move(o)); }

// ---- batch --------------------------------------------------------------------------------

namespace {
// Stands for the batch's pipeline when its body could not be made.
class failing_step final : public step {
 public:
  explicit failing_step(std::exception_ptr e) : e_(std::move(e)) {}
  std::string_view operation() const override { return "batch"; }
  bool synchronous() const noexcept override { return true; }
  outcome run_now(exchange&, route_runtime&) override { std::rethrow_exception(e_); }

 private:
  std::exception_ptr e_;
};
}  // namespace

// The batch being filled: its exchange exists from the first body (its id is the batchId).
struct batch_step::open_batch {
  explicit open_batch(scheduler& s) : flushed(s) {}
  exchange ex;
  std::vector<any_body> bodies;
  time_point started{};
  cancel_signal flushed;  // fired when the size flush takes it: the timer stops waiting
};

struct batch_step::state {
  std::mutex mutex;
  std::shared_ptr<open_batch> current;
  bool watching_stop = false;
  bool stop_announced = false;
};

batch_step::batch_step(batch_options o, batch_fold fold, std::vector<std::unique_ptr<step>> sub)
    : options_(o), fold_(std::move(fold)), sub_(std::move(sub)), state_(std::make_unique<state>()) {}

batch_step::~batch_step() = default;

task<outcome> batch_step::run(exchange& ex, route_runtime& rt) {
  std::shared_ptr<open_batch> opened;
  std::shared_ptr<open_batch> full;
  bool watch = false;
  {
    std::lock_guard lock(state_->mutex);
    if (!state_->current) {
      opened = state_->current = std::make_shared<open_batch>(rt.clock());
      opened->started = rt.now();
      opened->ex.set_route(&rt);
      opened->ex.set_correlation_id(ex.correlation_id());
      watch = !std::exchange(state_->watching_stop, true);
    }
    open_batch& b = *state_->current;
    for (const auto& [k, v] : ex.headers()) b.ex.set_header(k, v);  // later items win
    b.bodies.push_back(std::move(ex.raw_body()));
    if (b.bodies.size() >= options_.size) full = std::move(state_->current);
  }
  if (watch) {
    // A stop with no batch open still says the batching is over.
    rt.intake().on_fire([this, &rt] {
      {
        std::lock_guard lock(state_->mutex);
        if (state_->current || state_->stop_announced) return;  // the pending batch's flush says it
        state_->stop_announced = true;
      }
      emit_stopped(rt, {});
    });
  }
  if (opened) {
    rt.events().emit(event_id::batch_started, [&] {
      return nlohmann::json{{"routeId", rt.id()}, {"batchSize", options_.size}, {"batchId", opened->ex.id()}};
    });
    if (opened != full) {
      rt.ctx().work_started();  // drain() waits for the timer and the batch it flushes
      rc::spawn(rt.frames(), [this, opened, &rt]() -> task<void> { return flush_later(opened, rt); });
    }
  }
  if (full) {
    full->flushed.fire();
    co_await flush(full, "size", rt);
  }
  co_return outcome::proceed();
}

task<void> batch_step::flush_later(std::shared_ptr<open_batch> b, route_runtime& rt) {
  co_await rt.clock().wait_until(b->started + options_.flush_interval, &b->flushed, &rt.intake());
  bool mine;
  {
    std::lock_guard lock(state_->mutex);
    mine = state_->current == b;
    if (mine) state_->current.reset();
  }
  if (mine) {
    const bool stopping = rt.intake().fired() && rt.now() < b->started + options_.flush_interval;
    co_await flush(b, stopping ? "stop" : "time", rt);
    if (stopping) {
      bool announce;
      {
        std::lock_guard lock(state_->mutex);
        announce = !std::exchange(state_->stop_announced, true);
      }
      if (announce) emit_stopped(rt, b->ex.id());
    }
  }
  rt.ctx().work_finished();
}

task<void> batch_step::flush(std::shared_ptr<open_batch> b, const char* reason, route_runtime& rt) {
  const std::size_t count = b->bodies.size();
  rt.events().emit(event_id::batch_flushed, [&] {
    return nlohmann::json{{"routeId", rt.id()},
                          {"batchId", b->ex.id()},
                          {"batchSize", count},
                          {"reason", reason},
                          {"waitTime", to_ms(rt.now() - b->started)}};
  });
  exchange& batch = b->ex;
  std::exception_ptr fold_failed;
  try {
    fold_(batch, std::move(b->bodies));
  } catch (...) {
    fold_failed = std::current_exception();
  }
  if (fold_failed) {
    // The batch still gets its exchange events: it fails at once, with what the fold threw.
    std::vector<std::unique_ptr<step>> fail;
    fail.push_back(std::make_unique<failing_step>(fold_failed));
    (void)co_await rt.run_child(fail, batch);
    co_return;
  }
  (void)co_await rt.run_child(sub_, batch);
}

void batch_step::emit_stopped(route_runtime& rt, const std::string& batch_id) {
  rt.events().emit(event_id::batch_stopped, [&] {
    nlohmann::json j{{"routeId", rt.id()}};
    j["batchId"] = batch_id.empty() ? nlohmann::json() : nlohmann::json(batch_id);
    return j;
  });
}

}  // namespace rc
