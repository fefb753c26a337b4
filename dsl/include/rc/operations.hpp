// Shaping operations whose callables may wait: enrich, validate, filter with a reason, and the
// coroutine forms of transform / process (docs/operations.md, "Callables that wait").
//
// A callable returning rc::task<T> is detected at compile time and gets a step that is not
// synchronous(): the route takes its coroutine path from that step on. A plain callable gets a
// synchronous step exactly as before (no frame, no extra branch), so adding these forms costs
// routes that do not use them nothing.
//
// Inside such a coroutine the exchange is the handle to the route: rc::sleep_for / sleep_until
// wait on the context's clock (virtual time in tests) and end early when the route stops or the
// exchange is abandoned; rc::request<Reply>(endpoint, body, ex) calls an endpoint (rc::direct,
// rc::http) with a body and the exchange's headers and correlation.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "rc/clock.hpp"
#include "rc/error.hpp"
#include "rc/exchange.hpp"
#include "rc/route.hpp"
#include "rc/step.hpp"
#include "rc/task.hpp"

namespace rc {

namespace detail {
template <class R>
struct task_traits {
  static constexpr bool is_task = false;
  using value = R;
};
template <class T>
struct task_traits<task<T>> {
  static constexpr bool is_task = true;
  using value = T;
};
/// R is an rc::task<T>: the callable waits.
template <class R>
inline constexpr bool is_task_v = task_traits<std::remove_cvref_t<R>>::is_task;
/// T for rc::task<T>, R itself otherwise.
template <class R>
using task_value_t = typename task_traits<std::remove_cvref_t<R>>::value;

/// The route an exchange is running in. Steps receive the runtime itself; a user callable only
/// has the exchange, which the executor binds to its (non-const) route before the first step.
inline route_runtime& runtime_of(const exchange& ex) {
  auto* rt = ex.route();
  if (!rt) throw error(errc::misconfigured, "the exchange is not running in a route (no clock or endpoint to use)");
  return const_cast<route_runtime&>(*rt);
}
}  // namespace detail

// ---- helpers for coroutine callables ---------------------------------------------------------

/// `co_await rc::sleep_until(ex, t)`: waits on the route's clock until `t`; wait_result::cancelled
/// when the route stopped taking work or the exchange was abandoned first.
inline scheduler::wait_awaiter sleep_until(const exchange& ex, time_point t) {
  route_runtime& rt = detail::runtime_of(ex);
  return rt.clock().wait_until(t, &rt.intake(), ex.abort_signal());
}
/// `co_await rc::sleep_for(ex, d)`: sleep_until(ex, now + d).
inline scheduler::wait_awaiter sleep_for(const exchange& ex, duration d) {
  route_runtime& rt = detail::runtime_of(ex);
  return rt.clock().wait_until(rt.now() + d, &rt.intake(), ex.abort_signal());
}

/// `co_await rc::request<Reply>(endpoint, body, ex)`: calls an endpoint with `call()` (rc::direct,
/// rc::http) with `body`, `ex`'s headers, correlation, deadline and abort signal, and returns the
/// reply's body. A reply of another type is RC5002; the endpoint's own failures pass through
/// (RC5004 when no route serves a direct endpoint).
template <class Reply, class D, class B>
task<Reply> request(D endpoint, B body, const exchange& ex) {
  exchange call;
  call.set_body(std::move(body));
  for (const auto& [k, v] : ex.headers()) call.set_header(k, v);
  call.set_correlation_id(ex.correlation_id());
  if (ex.deadline()) call.set_deadline(*ex.deadline());
  call.set_abort_signal(ex.abort_signal());
  call.set_route(ex.route());
  exchange reply = co_await endpoint.call(call, detail::runtime_of(ex));
  if (!reply.raw_body().template holds<Reply>())
    throw error(errc::validation, "request(): the reply body is not of the requested type");
  co_return std::move(reply.template body<Reply>());
}

// ---- filter verdicts -------------------------------------------------------------------------

/// What a filter predicate may return instead of bool: rc::keep(), or rc::drop("reason").
class verdict {
 public:
  verdict() = default;
  explicit verdict(std::string drop_reason) : dropped_(true), reason_(std::move(drop_reason)) {}
  bool kept() const noexcept { return !dropped_; }
  const std::string& reason() const noexcept { return reason_; }
  std::string take_reason() noexcept { return std::move(reason_); }

 private:
  bool dropped_ = false;
  std::string reason_;
};
/// Keep the exchange.
inline verdict keep() { return {}; }
/// Drop the exchange; route:exchange:dropped carries `reason`.
inline verdict drop(std::string reason = "filtered") { return verdict(std::move(reason)); }

namespace detail {
/// A filter result: bool (false drops as "filtered"), rc::verdict, or std::optional<std::string>
/// (a reason drops, nullopt keeps).
template <class R>
inline constexpr bool filter_result_v =
    std::is_same_v<std::decay_t<R>, verdict> || std::is_same_v<std::decay_t<R>, std::optional<std::string>> ||
    std::is_convertible_v<R, bool>;

template <class R>
outcome filter_outcome(R&& r) {
  using D = std::decay_t<R>;
  if constexpr (std::is_same_v<D, verdict>)
    return r.kept() ? outcome::proceed() : outcome::dropped(r.take_reason());
  else if constexpr (std::is_same_v<D, std::optional<std::string>>)
    return r ? outcome::dropped(std::move(*r)) : outcome::proceed();
  else
    return static_cast<bool>(r) ? outcome::proceed() : outcome::dropped("filtered");
}

/// The predicate's call: (const Body&, const exchange&) when it takes the exchange, else (const Body&).
template <class Body, class P>
decltype(auto) call_filter(P& p, exchange& ex) {
  const Body& b = ex.body<Body>();
  if constexpr (std::is_invocable_v<P&, const Body&, const exchange&>)
    return p(b, static_cast<const exchange&>(ex));
  else
    return p(b);
}
template <class Body, class P>
using filter_call_t = decltype(call_filter<Body>(std::declval<P&>(), std::declval<exchange&>()));

[[noreturn]] inline void throw_filter_failure(std::exception_ptr e) {
  throw error(errc::step_failed, "Filter predicate threw: " + message_of(e), true, e);
}
}  // namespace detail

/// .filter(p): keeps or drops on the predicate's result (see detail::filter_result_v).
template <class Body, class P>
class filter_step final : public step {
  using result = detail::filter_call_t<Body, P>;
  static constexpr bool waits = detail::is_task_v<result>;

 public:
  explicit filter_step(P p) : p_(std::move(p)) {}
  std::string_view operation() const override { return "filter"; }
  bool synchronous() const noexcept override { return !waits; }
  outcome run_now(exchange& ex, route_runtime&) override {
    if constexpr (!waits) {
      try {
        return detail::filter_outcome(detail::call_filter<Body>(p_, ex));
      } catch (...) {
        detail::throw_filter_failure(std::current_exception());
      }
    } else {
      std::terminate();  // never called: synchronous() is false
    }
  }
  task<outcome> run(exchange& ex, route_runtime& rt) override {
    if constexpr (waits) {
      std::exception_ptr failure;
      try {
        co_return detail::filter_outcome(co_await detail::call_filter<Body>(p_, ex));
      } catch (...) {
        failure = std::current_exception();
      }
      detail::throw_filter_failure(failure);
    } else {
      co_return run_now(ex, rt);
    }
  }

 private:
  P p_;
};

// ---- transform / process that wait -----------------------------------------------------------

/// .transform(f) where f returns rc::task<Out>: the awaited value becomes the body.
template <class In, class Out, class F>
class async_transform_step final : public step {
 public:
  explicit async_transform_step(F f) : f_(std::move(f)) {}
  std::string_view operation() const override { return "transform"; }
  task<outcome> run(exchange& ex, route_runtime&) override {
    Out out = co_await start(ex);
    if constexpr (std::is_same_v<In, Out>)
      ex.body<In>() = std::move(out);
    else
      ex.set_body(std::move(out));
    co_return outcome::proceed();
  }

 private:
  // Not a coroutine: hands back the callable's own task (the body moves into its frame).
  task<Out> start(exchange& ex) {
    In& in = ex.body<In>();
    if constexpr (std::is_invocable_v<F&, In&&, exchange&>)
      return f_(std::move(in), ex);
    else
      return f_(std::move(in));
  }

  F f_;
};

/// .process(f) where f(exchange&) returns rc::task<void>.
template <class F>
class async_process_step final : public step {
 public:
  explicit async_process_step(F f) : f_(std::move(f)) {}
  std::string_view operation() const override { return "process"; }
  task<outcome> run(exchange& ex, route_runtime&) override {
    co_await f_(ex);
    co_return outcome::proceed();
  }

 private:
  F f_;
};

// ---- validate --------------------------------------------------------------------------------

namespace detail {
/// What a validator's failure becomes: an rc::error passes unchanged (an endpoint's RC5004 stays
/// RC5004); anything else is RC5002 with the validator's message, not retryable.
[[noreturn]] inline void throw_validation_failure(std::exception_ptr e) {
  if (error_of(e)) std::rethrow_exception(e);
  throw error(errc::validation, message_of(e), false, e);
}

template <class Body, class F>
decltype(auto) call_validator(F& f, exchange& ex) {
  const Body& b = ex.body<Body>();
  if constexpr (std::is_invocable_v<F&, const Body&, const exchange&>)
    return f(b, static_cast<const exchange&>(ex));
  else
    return f(b);
}
template <class Body, class F>
using validator_call_t = decltype(call_validator<Body>(std::declval<F&>(), std::declval<exchange&>()));

template <class Body, class Out, class R>
void adopt_validated(exchange& ex, R&& r) {
  if constexpr (std::is_same_v<Out, Body>)
    ex.body<Body>() = std::forward<R>(r);
  else
    ex.set_body(Out(std::forward<R>(r)));
}
}  // namespace detail

/// .validate(f): the validator's result (possibly of another type) replaces the body; a void
/// validator only checks. The body stays untouched until the validator returns, so an error
/// handler sees the record that failed.
template <class Body, class Out, class F>
class validate_step final : public step {
  using result = detail::validator_call_t<Body, F>;
  static constexpr bool waits = detail::is_task_v<result>;

 public:
  explicit validate_step(F f) : f_(std::move(f)) {}
  std::string_view operation() const override { return "validate"; }
  bool synchronous() const noexcept override { return !waits; }
  outcome run_now(exchange& ex, route_runtime&) override {
    if constexpr (!waits) {
      try {
        if constexpr (std::is_void_v<result>)
          detail::call_validator<Body>(f_, ex);
        else
          detail::adopt_validated<Body, Out>(ex, detail::call_validator<Body>(f_, ex));
      } catch (...) {
        detail::throw_validation_failure(std::current_exception());
      }
      return outcome::proceed();
    } else {
      std::terminate();  // never called: synchronous() is false
    }
  }
  task<outcome> run(exchange& ex, route_runtime& rt) override {
    if constexpr (waits) {
      std::exception_ptr failure;
      try {
        if constexpr (std::is_void_v<detail::task_value_t<result>>)
          co_await detail::call_validator<Body>(f_, ex);
        else
          detail::adopt_validated<Body, Out>(ex, co_await detail::call_validator<Body>(f_, ex));
        co_return outcome::proceed();
      } catch (...) {
        failure = std::current_exception();
      }
      detail::throw_validation_failure(failure);
    } else {
      co_return run_now(ex, rt);
    }
  }

 private:
  F f_;
};

// ---- enrich ----------------------------------------------------------------------------------

namespace detail {
/// No aggregator: the result replaces the body.
struct replace_body {};

template <class D>
concept request_endpoint = requires(D& d, exchange& ex, route_runtime& rt) {
  { d.call(ex, rt) } -> std::same_as<task<exchange>>;
};

/// How an aggregator combines (original, result), checked in this order:
///   (Body&, Result&&[, exchange&]) returning void  -> edits the body in place (type unchanged)
///   (Body&&, Result&&, exchange&) returning X      -> X becomes the body
///   (Body&&, Result&&) returning X                 -> X becomes the body
enum class agg_form { replace, in_place_ex, in_place, new_body_ex, new_body, invalid };

template <class A, class... Args>
constexpr bool void_call() {
  if constexpr (std::is_invocable_v<A&, Args...>)
    return std::is_void_v<std::invoke_result_t<A&, Args...>>;
  else
    return false;
}

template <class Body, class R, class A>
constexpr agg_form agg_form_of() {
  if constexpr (std::is_same_v<A, replace_body>)
    return agg_form::replace;
  else if constexpr (void_call<A, Body&, R&&, exchange&>())
    return agg_form::in_place_ex;
  else if constexpr (void_call<A, Body&, R&&>())
    return agg_form::in_place;
  else if constexpr (std::is_invocable_v<A&, Body&&, R&&, exchange&>)
    return agg_form::new_body_ex;
  else if constexpr (std::is_invocable_v<A&, Body&&, R&&>)
    return agg_form::new_body;
  else
    return agg_form::invalid;
}

/// The body type after enrich.
template <class Body, class R, class A, agg_form Form = agg_form_of<Body, R, A>()>
struct enriched_body {
  using type = Body;  // in place, or invalid (reported by the builder's static_assert)
};
template <class Body, class R, class A>
struct enriched_body<Body, R, A, agg_form::replace> {
  using type = R;
};
template <class Body, class R, class A>
struct enriched_body<Body, R, A, agg_form::new_body_ex> {
  using type = std::decay_t<std::invoke_result_t<A&, Body&&, R&&, exchange&>>;
};
template <class Body, class R, class A>
struct enriched_body<Body, R, A, agg_form::new_body> {
  using type = std::decay_t<std::invoke_result_t<A&, Body&&, R&&>>;
};

/// The fetcher's call: (const Body&, exchange&) when it takes the exchange, else (const Body&).
template <class Body, class T>
decltype(auto) call_fetcher(T& t, exchange& ex) {
  const Body& b = ex.body<Body>();
  if constexpr (std::is_invocable_v<T&, const Body&, exchange&>)
    return t(b, ex);
  else
    return t(b);
}

template <class G, class I>
struct only_into {
  G get;
  I into;
  template <class B, class R>
  void operator()(B& original, R&& result) {
    std::invoke(into, original) = std::invoke(get, std::forward<R>(result));
  }
};
template <class G>
struct only_value {
  G get;
  template <class B, class R>
  auto operator()(B&&, R&& result) {
    return std::decay_t<std::invoke_result_t<G&, R&&>>(std::invoke(get, std::forward<R>(result)));
  }
};
struct none_aggregator {
  template <class B, class R>
  void operator()(B&, R&&) const noexcept {}
};
}  // namespace detail

/// enrich aggregator: the projection `get` of the result (a member pointer or a callable) becomes
/// the body.
template <class G>
detail::only_value<G> only(G get) {
  return {std::move(get)};
}
/// enrich aggregator: the projection `get` of the result is assigned to the projection `into` of
/// the original body (a member pointer, or a callable returning a reference); the body type stays.
template <class G, class I>
detail::only_into<G, I> only(G get, I into) {
  return {std::move(get), std::move(into)};
}
/// enrich aggregator: the result is discarded, the body stays as it was.
inline detail::none_aggregator none() { return {}; }

/// .enrich(target[, aggregator]): fetches a result with the body (an endpoint's reply, or a
/// callable's return value, possibly awaited) and combines it with the body.
template <class Body, class Result, class Target, class Agg>
class enrich_step final : public step {
  static constexpr bool endpoint = detail::request_endpoint<Target>;
  static constexpr bool waits = [] {
    if constexpr (endpoint)
      return true;
    else
      return detail::is_task_v<decltype(detail::call_fetcher<Body>(std::declval<Target&>(),
                                                                   std::declval<exchange&>()))>;
  }();
  static constexpr detail::agg_form form = detail::agg_form_of<Body, Result, Agg>();

 public:
  enrich_step(Target target, Agg agg) : target_(std::move(target)), agg_(std::move(agg)) {}
  std::string_view operation() const override { return "enrich"; }
  std::string_view adapter() const override {
    if constexpr (endpoint)
      return target_.adapter();
    else
      return "inline";
  }
  bool synchronous() const noexcept override { return !waits; }
  outcome run_now(exchange& ex, route_runtime&) override {
    if constexpr (!waits) {
      combine(ex, detail::call_fetcher<Body>(target_, ex));
      return outcome::proceed();
    } else {
      std::terminate();  // never called: synchronous() is false
    }
  }
  task<outcome> run(exchange& ex, route_runtime& rt) override {
    if constexpr (endpoint) {
      exchange reply = co_await target_.call(ex, rt);
      if (!reply.raw_body().template holds<Result>())
        throw error(errc::validation, fmt::format("enrich(): the {} endpoint's reply body is not of the expected type",
                                                  target_.adapter()));
      combine(ex, std::move(reply.template body<Result>()));
      co_return outcome::proceed();
    } else if constexpr (waits) {
      combine(ex, co_await detail::call_fetcher<Body>(target_, ex));
      co_return outcome::proceed();
    } else {
      co_return run_now(ex, rt);
    }
  }

 private:
  void combine(exchange& ex, Result r) {
    using detail::agg_form;
    if constexpr (form == agg_form::replace) {
      if constexpr (std::is_same_v<Result, Body>)
        ex.body<Body>() = std::move(r);
      else
        ex.set_body(std::move(r));
    } else if constexpr (form == agg_form::in_place_ex) {
      agg_(ex.body<Body>(), std::move(r), ex);
    } else if constexpr (form == agg_form::in_place) {
      agg_(ex.body<Body>(), std::move(r));
    } else {
      using Out = typename detail::enriched_body<Body, Result, Agg>::type;
      Out out = [&] {
        if constexpr (form == agg_form::new_body_ex)
          return agg_(std::move(ex.body<Body>()), std::move(r), ex);
        else
          return agg_(std::move(ex.body<Body>()), std::move(r));
      }();
      if constexpr (std::is_same_v<Out, Body>)
        ex.body<Body>() = std::move(out);
      else
        ex.set_body(std::move(out));
    }
  }

  Target target_;
  Agg agg_;
};

}  // namespace rc
