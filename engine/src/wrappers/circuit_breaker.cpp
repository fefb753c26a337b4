#include "rc/wrappers/circuit_breaker.hpp"

#include <atomic>
#include <limits>
#include <mutex>
#include <optional>

#include "rc/gates/breaker.hpp"
#include "rc/gates/keyed_lru.hpp"
#include "rc/route.hpp"

namespace rc {

void circuit_breaker_options::validate() const {
  if (failure_threshold < 1)
    invalid_option("circuitBreaker", "failure_threshold", "an integer >= 1", failure_threshold);
  if (window < std::chrono::milliseconds(1))
    invalid_option("circuitBreaker", "window", "a duration >= 1ms", ms_text(window));
  if (cooldown < std::chrono::milliseconds(1))
    invalid_option("circuitBreaker", "cooldown", "a duration >= 1ms", ms_text(cooldown));
  if (half_open_max < 1) invalid_option("circuitBreaker", "half_open_max", "an integer >= 1", half_open_max);
  if (max_keys < 1 || max_keys > max_keys_limit)
    invalid_option("circuitBreaker", "max_keys", "an integer in [1, 1000000]", max_keys);
}

namespace {

class breaker_step final : public wrapper {
 public:
  std::string_view wrapper_kind() const noexcept override { return "circuitBreaker"; }

  breaker_step(circuit_breaker_options o, std::unique_ptr<step> inner, rc::scope s, body_type_slot body_type)
      : wrapper(std::move(inner), s),
        options_(std::move(o)),
        body_type_(std::move(body_type)),
        params_{options_.failure_threshold, options_.window, options_.cooldown, options_.half_open_max},
        table_(options_.max_keys) {}

  bool synchronous() const noexcept override { return inner_is_sync(); }

  outcome run_now(exchange& ex, route_runtime& rt) override {
    std::string key;
    if (options_.key)
      if (auto failed = derive_key(ex, key)) return std::move(*failed);
    const pass p = admit(ex, rt, key);
    if (!p.admitted) return refused(p, ex, rt, key);
    outcome o = run_inner_now(ex, rt);
    finish(p, o, ex, rt, key);
    return o;
  }

  task<outcome> run(exchange& ex, route_runtime& rt) override {
    std::string key;
    if (options_.key)
      if (auto failed = derive_key(ex, key)) co_return std::move(*failed);
    const pass p = admit(ex, rt, key);
    if (!p.admitted) co_return refused(p, ex, rt, key);
    outcome o;
    if (inner_is_sync())
      o = run_inner_now(ex, rt);
    else
      o = co_await run_inner(ex, rt);
    finish(p, o, ex, rt, key);
    co_return o;
  }

 private:
  struct pass {
    bool admitted = false;
    bool overflow = false;  // keyed, table full of busy breakers: the shared overflow breaker
    breaker::ticket ticket;
    breaker::state state = breaker::state::closed;  // refused: the state that refused it
    duration retry_after{};
  };

  /// Derives the key; a throwing selector fails the exchange with RC5003 (not retryable).
  std::optional<outcome> derive_key(const exchange& ex, std::string& key) const {
    try {
      key = options_.key(ex);
      return std::nullopt;
    } catch (...) {
      return outcome::failed(std::make_exception_ptr(
          error(errc::misconfigured,
                "circuitBreaker({ key }) selector threw; it must return a string for every exchange (" +
                    message_of(std::current_exception()) + ")",
                false, std::current_exception())));
    }
  }

  /// The breaker for `key` (the single one when unkeyed). Called with the mutex held. `now` is
  /// read only when a full keyed table has to judge which breaker is idle.
  template <class Now>
  breaker* locate(const std::string& key, Now& now, bool& overflow) {
    overflow = false;
    if (!options_.key) return &single_;
    breaker* b = table_.touch(key, [&](const breaker& s) { return s.idle(now(), params_); });
    if (b) return b;
    overflow = true;
    return &overflow_;
  }

  // The clock is read only when the answer depends on it (open or half-open, a full keyed
  // table): a closed breaker admits without it, so it costs a healthy route no clock read.
  pass admit(const exchange& ex, route_runtime& rt, const std::string& key) {
    std::optional<time_point> t;
    auto now = [&] {
      if (!t) t = rt.now();
      return *t;
    };
    pass p;
    // An open unkeyed breaker inside its cooldown refuses without the lock: only the cooldown's
    // end (or a close) changes that answer, and both are decided under the lock.
    if (!options_.key) {
      const auto until = single_open_until_.load(std::memory_order_acquire);
      if (until != no_deadline && now().time_since_epoch().count() < until) {
        p.state = breaker::state::open;
        p.retry_after = duration(until) - now().time_since_epoch();
        return p;
      }
    }
    bool half_opened = false;
    {
      std::lock_guard lock(mutex_);
      breaker* b = locate(key, now, p.overflow);
      const breaker::admission a = b->admit(b->current() == breaker::state::closed ? time_point{} : now(), params_);
      p.admitted = a.admitted;
      p.ticket = a.t;
      p.state = b->current();
      p.retry_after = a.retry_after;
      half_opened = a.became_half_open;
      if (b == &single_) publish_single();
    }
    if (half_opened)
      rt.events().emit(event_id::breaker_half_open, [&] { return with_key(identity(ex, rt, options_.label), key); });
    return p;
  }

  void finish(const pass& p, const outcome& o, const exchange& ex, route_runtime& rt, const std::string& key) {
    const bool failure = o.is_fail() && counts(o.error);
    if (!failure && !p.ticket.probe) return;  // only a probe's success moves the state
    const time_point now = failure ? rt.now() : time_point{};
    breaker::transition tr = breaker::transition::none;
    int failures = 0;
    {
      std::lock_guard lock(mutex_);
      breaker* b = p.overflow ? &overflow_ : options_.key ? table_.find(key) : &single_;
      if (!b) return;  // forgotten while the call ran (it was idle): nothing to update
      tr = failure ? b->on_failure(p.ticket, now, params_) : b->on_success(p.ticket);
      failures = b->failure_count();
      if (b == &single_) publish_single();
    }
    if (tr == breaker::transition::opened)
      rt.events().emit(event_id::breaker_opened, [&] {
        auto j = with_key(identity(ex, rt, options_.label), key);
        j["failureCount"] = failures;
        j["threshold"] = options_.failure_threshold;
        j["cooldownMs"] = to_ms(options_.cooldown);
        return j;
      });
    else if (tr == breaker::transition::closed)
      rt.events().emit(event_id::breaker_closed, [&] { return with_key(identity(ex, rt, options_.label), key); });
  }

  bool counts(const std::exception_ptr& e) const {
    try {
      if (const error* err = error_of(e)) return options_.is_failure ? options_.is_failure(*err) : err->retryable();
      const error err = to_error(e);
      return options_.is_failure ? options_.is_failure(err) : err.retryable();
    } catch (...) {
      return true;  // a predicate that throws cannot vouch for the downstream
    }
  }

  outcome refused(const pass& p, exchange& ex, route_runtime& rt, const std::string& key) {
    rt.events().emit(event_id::breaker_rejected, [&] {
      auto j = with_key(identity(ex, rt, options_.label), key);
      j["state"] = to_string(p.state);
      j["retryAfterMs"] = to_ms(p.retry_after);
      return j;
    });
    if (!options_.fallback) return open_error(p, rt, key);
    try {
      recovery r = options_.fallback(ex);
      switch (r.what()) {
        case recovery::kind::body:
          detail::check_recovery_body(body_type_, r.value(), "circuitBreaker({ fallback })");
          ex.raw_body() = std::move(r.value());
          return outcome::proceed();
        case recovery::kind::drop:
          return outcome::dropped(r.reason());
        case recovery::kind::rethrow:
          return open_error(p, rt, key);
        case recovery::kind::forward:
          return outcome::failed(std::make_exception_ptr(
              error(errc::misconfigured,
                    "circuitBreaker({ fallback }) cannot forward(); return a body, drop or rethrow, or forward from "
                    "an error() handler around the breaker",
                    false)));
      }
    } catch (...) {
      return outcome::failed(std::current_exception());
    }
    return open_error(p, rt, key);
  }

  // A fast failure's RC5025, its message and details built when first read (an outage's flood of
  // them is mostly let go unread). What it names is copied: the error may outlive the breaker.
  struct open_fields {
    std::string name;  // the breaker's label, the route's id (route scope) or the step's label
    bool route_id = false;
    std::string key;
    bool keyed = false;
    breaker::state state = breaker::state::open;
    duration retry_after{};

    std::string message() const {
      return fmt::format("circuit breaker of {}{}{} is {}{}; retry after {}ms", route_id ? "route \"" : "", name,
                         route_id ? "\"" : "", to_string(state), keyed ? " for key \"" + key + "\"" : std::string(),
                         to_ms(retry_after));
    }
    nlohmann::json details() const {
      nlohmann::json details = {{"retry_after_ms", to_ms(retry_after)}, {"state", to_string(state)}};
      if (keyed) details["key"] = key;
      return details;
    }
  };

  outcome open_error(const pass& p, route_runtime& rt, const std::string& key) const {
    const bool route_id = options_.label.empty() && scope_ == rc::scope::route;
    return outcome::failed(
        std::make_exception_ptr(deferred_error(errc::circuit_open, false,
                                               open_fields{.name = !options_.label.empty() ? options_.label
                                                                   : route_id              ? rt.id()
                                                                                           : std::string(label()),
                                                           .route_id = route_id,
                                                           .key = options_.key ? key : std::string(),
                                                           .keyed = static_cast<bool>(options_.key),
                                                           .state = p.state,
                                                           .retry_after = p.retry_after})));
  }

  nlohmann::json with_key(nlohmann::json j, const std::string& key) const {
    if (options_.key) j["key"] = key;
    return j;
  }

  /// Mirrors the unkeyed breaker's cooldown end for the lock-free refusal (mutex held).
  void publish_single() noexcept {
    single_open_until_.store(single_.current() == breaker::state::open
                                 ? (single_.opened_at() + params_.cooldown).time_since_epoch().count()
                                 : no_deadline,
                             std::memory_order_release);
  }

  static constexpr duration::rep no_deadline = std::numeric_limits<duration::rep>::min();

  circuit_breaker_options options_;
  body_type_slot body_type_;
  breaker_params params_;
  std::mutex mutex_;
  breaker single_;
  std::atomic<duration::rep> single_open_until_{no_deadline};  // engine ns; no_deadline unless open
  breaker overflow_;
  keyed_lru<breaker> table_;
};

}  // namespace

std::unique_ptr<step> make_circuit_breaker(circuit_breaker_options options, std::unique_ptr<step> inner, scope s,
                                           body_type_slot body_type) {
  options.validate();
  return std::make_unique<breaker_step>(std::move(options), std::move(inner), s, std::move(body_type));
}

}  // namespace rc
