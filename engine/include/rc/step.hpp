// Steps: the unit a pipeline is made of, and the wrapper base every resilience operation uses.
//
// A step either completes synchronously (`synchronous()` true, `run_now`) — most do, and then no
// coroutine frame exists for it at all — or returns a task. Its outcome says what happens next:
// proceed, drop (with a reason) or fail (with the error; plain exceptions are caught by the
// executor and normalised to RC5001).
//
// A wrapper owns exactly one inner step (or none, for route-scope gates that only admit) and
// reports the inner step's operation and label, so events name what the user wrote. Its events
// carry a `gateId`, "<kind>#<n>" ("throttle#2"): the n-th wrapper of that kind in its route,
// counted in declaration order (route scope first, then the steps in order, outermost wrapper
// first). The route assigns it when it is built, so two throttles of one route are told apart.
#pragma once

#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "rc/exchange.hpp"
#include "rc/task.hpp"

namespace rc {

class route_runtime;

struct outcome {
  enum class kind : std::uint8_t { proceed, drop, fail };
  kind what = kind::proceed;
  bool reported = false;     // a route:step:error was already emitted for this failure
  std::string reason;        // drop
  std::exception_ptr error;  // fail

  static outcome proceed() noexcept { return {}; }
  static outcome dropped(std::string reason) {
    outcome o;
    o.what = kind::drop;
    o.reason = std::move(reason);
    return o;
  }
  static outcome failed(std::exception_ptr e) {
    outcome o;
    o.what = kind::fail;
    o.error = std::move(e);
    return o;
  }
  bool ok() const noexcept { return what == kind::proceed; }
  bool is_drop() const noexcept { return what == kind::drop; }
  bool is_fail() const noexcept { return what == kind::fail; }
};

enum class scope : std::uint8_t { route, step };
inline std::string_view to_string(scope s) noexcept { return s == scope::route ? "route" : "step"; }

class step {
 public:
  virtual ~step() = default;
  /// The operation name ("transform", "to", "filter", ...).
  virtual std::string_view operation() const = 0;
  /// The label events show: the operation unless the user or an adapter named it.
  virtual std::string_view label() const { return operation(); }
  /// The adapter behind the step ("log", "spy", "inline"), empty when none.
  virtual std::string_view adapter() const { return {}; }

  virtual bool synchronous() const noexcept { return false; }
  /// The synchronous path; only called when synchronous() is true. May throw.
  virtual outcome run_now(exchange&, route_runtime&) { std::terminate(); }
  /// The asynchronous path. May throw.
  virtual task<outcome> run(exchange& ex, route_runtime& rt) { co_return run_now(ex, rt); }
  /// For a step that is not synchronous() but often need not wait (a bulkhead with a free slot):
  /// finish now into `out` and return true; or return false, and the executor awaits
  /// resume(ex, rt, out). A step that returns false having done nothing observable (no event,
  /// nothing acquired or counted, no user callback run) needs no resume(): it is run(). One that
  /// got part way (retry: a first attempt failed) leaves its progress in `out` for its resume().
  /// Lets a route stay on its synchronous path until a step really waits. May throw.
  virtual bool try_run_now(exchange&, route_runtime&, outcome&) { return false; }
  /// Goes on asynchronously from where try_run_now stopped (`partial`, what it left). May throw.
  virtual task<outcome> resume(exchange& ex, route_runtime& rt, outcome partial) {
    (void)partial;
    return run(ex, rt);
  }

  /// Steps that emit their own events (gates, segments) get no generic route:step:* events.
  virtual bool owns_events() const noexcept { return false; }
  /// Wrappers report their failures as route:step:failed; plain steps do not (reference §4).
  virtual bool reports_failure() const noexcept { return false; }

  /// What the executor's loop asks of a step for every exchange, read once: label(),
  /// owns_events() and synchronous() are fixed once the route is built, and each is a virtual
  /// call (two or three through a wrapper). route_runtime freezes every step of its chain, nested
  /// ones included, when it is made; a step never frozen answers through the calls.
  void freeze() {
    frozen_label_ = label();
    frozen_owns_events_ = owns_events();
    frozen_synchronous_ = synchronous();
    frozen_ = true;
  }
  std::string_view loop_label() const { return frozen_ ? frozen_label_ : label(); }
  bool loop_owns_events() const noexcept { return frozen_ ? frozen_owns_events_ : owns_events(); }
  bool loop_synchronous() const noexcept { return frozen_ ? frozen_synchronous_ : synchronous(); }

 private:
  std::string_view frozen_label_;
  bool frozen_ = false;
  bool frozen_owns_events_ = false;
  bool frozen_synchronous_ = false;
};

/// Runs a step and turns an escaping exception into a failed outcome (the raw exception, not
/// yet normalised: step-scope retry sees what the step threw).
inline outcome run_now_guarded(step& s, exchange& ex, route_runtime& rt) noexcept {
  try {
    return s.run_now(ex, rt);
  } catch (...) {
    return outcome::failed(std::current_exception());
  }
}
/// try_run_now, an escaping exception becoming a failed outcome (true: the step finished).
inline bool try_run_now_guarded(step& s, exchange& ex, route_runtime& rt, outcome& out) noexcept {
  try {
    return s.try_run_now(ex, rt, out);
  } catch (...) {
    out = outcome::failed(std::current_exception());
    return true;
  }
}
task<outcome> run_guarded(step& s, exchange& ex, route_runtime& rt);

class wrapper : public step {
 public:
  wrapper(std::unique_ptr<step> inner, rc::scope s) : inner_(std::move(inner)), scope_(s) {}

  std::string_view operation() const override { return inner_ ? inner_->operation() : "route"; }
  std::string_view label() const override { return inner_ ? inner_->label() : "route"; }
  std::string_view adapter() const override { return inner_ ? inner_->adapter() : std::string_view{}; }
  bool owns_events() const noexcept override { return scope_ == rc::scope::route || (inner_ && inner_->owns_events()); }
  bool reports_failure() const noexcept override { return true; }

  rc::scope scope() const noexcept { return scope_; }
  const step* inner() const noexcept { return inner_.get(); }
  step* inner() noexcept { return inner_.get(); }
  /// Puts `s` in place of the inner step and returns the old one. Only before the route is added
  /// to a context (a test kit replacing an endpoint), never while it runs.
  std::unique_ptr<step> replace_inner(std::unique_ptr<step> s) noexcept {
    std::swap(inner_, s);
    return s;
  }

  /// The kind in gate ids and events: "throttle", "slowDown", "rateLimit", "retry", "delay".
  virtual std::string_view wrapper_kind() const noexcept { return "wrapper"; }
  /// "<kind>#<n>", unique among the wrappers of one route; empty until a route assigns it.
  const std::string& gate_id() const noexcept { return gate_id_; }
  void set_gate_id(std::string id) { gate_id_ = std::move(id); }
  /// Told once its route joins a context, before any exchange, how many threads may run the
  /// route's exchanges at once (the context's threads). A keyed rate gate splits its table for
  /// more than one (gate_step.hpp); a test may call it earlier. Nothing by default.
  virtual void attach(unsigned threads) { (void)threads; }

 protected:
  /// Runs the inner step (a gate without one simply proceeds), never throws.
  task<outcome> run_inner(exchange& ex, route_runtime& rt);
  bool inner_is_sync() const noexcept { return !inner_ || inner_->synchronous(); }
  outcome run_inner_now(exchange& ex, route_runtime& rt) noexcept {
    return inner_ ? run_now_guarded(*inner_, ex, rt) : outcome::proceed();
  }
  /// The identity fields every wrapper event carries:
  /// routeId, exchangeId, correlationId, gateId, stepLabel, scope (+ label when given).
  nlohmann::json identity(const exchange& ex, const route_runtime& rt, std::string_view label = {}) const;

  std::unique_ptr<step> inner_;
  rc::scope scope_;
  std::string gate_id_;
};

}  // namespace rc
