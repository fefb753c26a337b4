#include "rc/wrappers/cache.hpp"

#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "rc/clock.hpp"
#include "rc/route.hpp"

namespace rc {

// ---- providers ---------------------------------------------------------------------------

std::optional<any_body> cache_provider::get_now(const std::string&, const scheduler&) {
  throw error(errc::misconfigured, "cache provider: get_now() called on an asynchronous provider");
}
void cache_provider::put_now(const std::string&, const any_body&, std::optional<duration>, const scheduler&) {
  throw error(errc::misconfigured, "cache provider: put_now() called on an asynchronous provider");
}

struct memory_cache_provider::impl {
  struct entry {
    std::string key;
    any_body body;
    time_point expires;
  };
  explicit impl(std::size_t max) : max_entries(max) {}
  std::size_t max_entries;
  mutable std::mutex mutex;
  std::list<entry> lru;  // most recently used first
  std::unordered_map<std::string, std::list<entry>::iterator> index;
};

memory_cache_provider::memory_cache_provider(std::size_t max_entries)
    : impl_(std::make_unique<impl>(max_entries < 1 ? 1 : max_entries)) {}
memory_cache_provider::~memory_cache_provider() = default;

std::optional<any_body> memory_cache_provider::get_now(const std::string& key, const scheduler& clock) {
  std::lock_guard lock(impl_->mutex);
  const auto it = impl_->index.find(key);
  if (it == impl_->index.end()) return std::nullopt;
  if (it->second->expires != time_point::max() && it->second->expires <= clock.now()) {
    impl_->lru.erase(it->second);
    impl_->index.erase(it);
    return std::nullopt;
  }
  impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second);
  return it->second->body.clone();
}

void memory_cache_provider::put_now(const std::string& key, const any_body& body, std::optional<duration> ttl,
                                    const scheduler& clock) {
  any_body copy = body.clone();
  if (body.has_value() && !copy.has_value())
    throw error(errc::misconfigured,
                fmt::format("cache(): the body type ({}) is not copyable, so it cannot be cached", body.type().name()));
  const time_point expires = ttl ? clock.now() + *ttl : time_point::max();
  std::lock_guard lock(impl_->mutex);
  if (const auto it = impl_->index.find(key); it != impl_->index.end()) {
    it->second->body = std::move(copy);
    it->second->expires = expires;
    impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second);
    return;
  }
  if (impl_->index.size() >= impl_->max_entries) {
    impl_->index.erase(impl_->lru.back().key);
    impl_->lru.pop_back();
  }
  impl_->lru.push_front({key, std::move(copy), expires});
  impl_->index.emplace(key, impl_->lru.begin());
}

task<std::optional<any_body>> memory_cache_provider::get(const std::string& key, const scheduler& clock) {
  co_return get_now(key, clock);
}
task<void> memory_cache_provider::put(const std::string& key, const any_body& body, std::optional<duration> ttl,
                                      const scheduler& clock) {
  put_now(key, body, ttl, clock);
  co_return;
}

std::size_t memory_cache_provider::size() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->index.size();
}

// ---- the wrapper -------------------------------------------------------------------------

void cache_options::validate() const {
  if (ttl && *ttl < std::chrono::milliseconds(1)) invalid_option("cache", "ttl", "a duration >= 1ms", ms_text(*ttl));
  if (max_entries < 1 || max_entries > max_entries_limit)
    invalid_option("cache", "max_entries", "an integer in [1, 10000000]", max_entries);
}

namespace {

// A miss waiting for the leader of its key. Lives in the waiting coroutine's frame; the leader
// fills it in under the wrapper's mutex and wakes it.
struct flight_waiter {
  timer_wait* wait = nullptr;
  bool done = false;               // the leader finished
  std::optional<any_body> result;  // its body, when it succeeded
};

class cache_step final : public wrapper {
 public:
  std::string_view wrapper_kind() const noexcept override { return "cache"; }

  cache_step(cache_options o, std::unique_ptr<step> inner, rc::scope s)
      : wrapper(std::move(inner), s), options_(std::move(o)) {
    provider_ = options_.provider ? options_.provider : std::make_shared<memory_cache_provider>(options_.max_entries);
  }

  bool synchronous() const noexcept override { return inner_is_sync() && provider_->synchronous(); }

  outcome run_now(exchange& ex, route_runtime& rt) override {
    std::string key;
    if (auto failed = derive_key(ex, key)) return std::move(*failed);
    std::optional<any_body> hit;
    try {
      hit = provider_->get_now(key, rt.clock());
    } catch (...) {
      if (options_.on_provider_error == cache_provider_error::bypass) {
        emit_failed(ex, rt, key, "get", std::current_exception());
        return run_inner_now(ex, rt);
      }
      return get_failed(ex, rt, key, std::current_exception());
    }
    if (hit) {
      restore(ex, rt, key, std::move(*hit));
      return outcome::proceed();
    }
    emit_key(event_id::cache_miss, ex, rt, key);
    outcome o = run_inner_now(ex, rt);
    if (o.ok()) {
      try {
        provider_->put_now(key, ex.raw_body(), options_.ttl, rt.clock());
        emit_stored(ex, rt, key);
      } catch (...) {
        put_failed(ex, rt, key, std::current_exception());
      }
    }
    return o;
  }

  task<outcome> run(exchange& ex, route_runtime& rt) override {
    std::string key;
    if (auto failed = derive_key(ex, key)) co_return std::move(*failed);
    for (;;) {
      std::optional<any_body> hit;
      std::exception_ptr get_error;
      try {
        hit = co_await provider_->get(key, rt.clock());
      } catch (...) {
        get_error = std::current_exception();
      }
      if (get_error && options_.on_provider_error == cache_provider_error::bypass) {
        // The store is unreachable: run as if uncached, and store nothing (it would fail too).
        emit_failed(ex, rt, key, "get", get_error);
        if (inner_is_sync()) co_return run_inner_now(ex, rt);
        co_return co_await run_inner(ex, rt);
      }
      if (get_error) co_return get_failed(ex, rt, key, get_error);
      if (hit) {
        restore(ex, rt, key, std::move(*hit));
        co_return outcome::proceed();
      }

      // A miss: lead the key's flight, or wait for its leader.
      auto wait = rt.clock().wait_queued(&rt.intake(), ex.abort_signal());
      flight_waiter me;
      me.wait = &wait.node;
      if (join_or_lead(key, me)) co_return co_await lead(ex, rt, key);

      // Unregisters `me` however this frame ends, so a leader never writes to a dead frame.
      waiter_guard guard{this, &key, &me};
      co_await wait.by_ref();
      guard.leave();
      if (me.done) {
        if (me.result) {
          restore(ex, rt, key, std::move(*me.result));
          co_return outcome::proceed();
        }
        continue;  // the leader failed or dropped: look again, one of the waiters leads
      }
      if (ex.abort_signal() && ex.abort_signal()->fired() && !rt.intake().fired())
        co_return outcome::dropped("client-gone");
      // Shutdown: no waiting for a leader that may itself be winding down.
      co_return co_await run_and_store(ex, rt, key);
    }
  }

 private:
  std::optional<outcome> derive_key(const exchange& ex, std::string& key) const {
    try {
      if (options_.key) {
        key = options_.key(ex);
        return std::nullopt;
      }
      nlohmann::json j = ex.raw_body().to_json();
      if (j.is_null() && ex.raw_body().has_value())
        throw error(errc::cache_key,
                    "the body has no JSON form; give cache({ key }) a function deriving the key from the exchange",
                    false);
      key = j.dump();
      return std::nullopt;
    } catch (...) {
      return outcome::failed(std::make_exception_ptr(
          error(errc::cache_key, "cache({ key }) could not derive a key: " + message_of(std::current_exception()),
                false, std::current_exception())));
    }
  }

  /// True: this exchange leads the flight for `key` (no one else is computing it). False: `me` is
  /// registered as a waiter on the current leader.
  bool join_or_lead(const std::string& key, flight_waiter& me) {
    std::lock_guard lock(mutex_);
    auto [it, inserted] = flights_.try_emplace(key);
    if (!inserted) it->second.push_back(&me);
    return inserted;
  }

  /// After a waiter woke: unregisters it unless the leader already handed it a result.
  void leave(const std::string& key, flight_waiter& me) {
    std::lock_guard lock(mutex_);
    if (me.done) return;
    if (auto it = flights_.find(key); it != flights_.end()) std::erase(it->second, &me);
  }

  task<outcome> lead(exchange& ex, route_runtime& rt, const std::string& key) {
    // Releases the waiters however this frame ends: a leader destroyed mid-step (an abandoned
    // run) must not leave them waiting for ever.
    leader_guard guard{this, &key, &rt};
    outcome o = co_await run_and_store(ex, rt, key);
    guard.done = true;
    finish_flight(key, o.ok() ? &ex.raw_body() : nullptr, rt);
    co_return o;
  }

  struct leader_guard {
    cache_step* self;
    const std::string* key;
    route_runtime* rt;
    bool done = false;
    ~leader_guard() {
      if (!done) self->finish_flight(*key, nullptr, *rt);
    }
  };

  struct waiter_guard {
    cache_step* self;
    const std::string* key;
    flight_waiter* me;
    bool left = false;
    void leave() {
      self->leave(*key, *me);
      left = true;
    }
    ~waiter_guard() {
      if (!left) self->leave(*key, *me);
    }
  };

  task<outcome> run_and_store(exchange& ex, route_runtime& rt, const std::string& key) {
    emit_key(event_id::cache_miss, ex, rt, key);
    outcome o;
    if (inner_is_sync())
      o = run_inner_now(ex, rt);
    else
      o = co_await run_inner(ex, rt);
    if (!o.ok()) co_return o;
    std::exception_ptr put_error;
    try {
      co_await provider_->put(key, ex.raw_body(), options_.ttl, rt.clock());
    } catch (...) {
      put_error = std::current_exception();
    }
    if (put_error)
      put_failed(ex, rt, key, put_error);
    else
      emit_stored(ex, rt, key);
    co_return o;
  }

  /// Hands the leader's body (null: it failed or dropped) to every waiter and wakes them.
  void finish_flight(const std::string& key, const any_body* body, route_runtime& rt) {
    std::lock_guard lock(mutex_);
    const auto it = flights_.find(key);
    if (it == flights_.end()) return;
    const time_point now = rt.now();
    for (flight_waiter* w : it->second) {
      w->done = true;
      if (body) w->result = body->clone();
      rt.clock().reschedule(*w->wait, now);
    }
    flights_.erase(it);
  }

  void restore(exchange& ex, route_runtime& rt, const std::string& key, any_body value) {
    ex.raw_body() = std::move(value);
    emit_key(event_id::cache_hit, ex, rt, key);
    if (scope_ == rc::scope::route)
      rt.events().emit(event_id::exchange_restored, [&] {
        return nlohmann::json{
            {"routeId", rt.id()}, {"exchangeId", ex.id()}, {"correlationId", ex.correlation_id()}, {"source", "cache"}};
      });
  }

  outcome get_failed(const exchange& ex, route_runtime& rt, const std::string& key, const std::exception_ptr& e) {
    emit_failed(ex, rt, key, "get", e);
    return outcome::failed(std::make_exception_ptr(
        error(errc::cache_provider, "cache provider failed on get: " + message_of(e), true, e, {{"key", key}})));
  }

  void put_failed(const exchange& ex, route_runtime& rt, const std::string& key, const std::exception_ptr& e) {
    emit_failed(ex, rt, key, "put", e);
  }

  void emit_failed(const exchange& ex, route_runtime& rt, const std::string& key, const char* operation,
                   const std::exception_ptr& e) {
    rt.events().emit(event_id::cache_failed, [&] {
      auto j = identity(ex, rt, options_.label);
      j["key"] = key;
      j["operation"] = operation;
      j["error"] = error_json(e, false);
      return j;
    });
  }

  void emit_key(event_id id, const exchange& ex, route_runtime& rt, const std::string& key) const {
    rt.events().emit(id, [&] {
      auto j = identity(ex, rt, options_.label);
      j["key"] = key;
      return j;
    });
  }

  void emit_stored(const exchange& ex, route_runtime& rt, const std::string& key) const {
    rt.events().emit(event_id::cache_stored, [&] {
      auto j = identity(ex, rt, options_.label);
      j["key"] = key;
      if (options_.ttl) j["ttlMs"] = to_ms(*options_.ttl);
      return j;
    });
  }

  cache_options options_;
  std::shared_ptr<cache_provider> provider_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::vector<flight_waiter*>> flights_;
};

}  // namespace

std::unique_ptr<step> make_cache(cache_options options, std::unique_ptr<step> inner, scope s) {
  options.validate();
  return std::make_unique<cache_step>(std::move(options), std::move(inner), s);
}

}  // namespace rc
