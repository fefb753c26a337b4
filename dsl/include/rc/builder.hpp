// rc::craft(): the fluent, typed route builder.
//
//   rc::craft().id("orders")
//       .throttle({.rate = 100})                  // before from(): route scope
//       .from(rc::simple(orders))                 // route_builder<order>
//       .transform([](order o) { return invoice{o}; })   // route_builder<invoice>
//       .retry({.max_attempts = 3})               // after from(): wraps the next step only
//       .to(rc::log());
//
// The body type is part of the builder's type: a step that cannot take the current body does not
// compile, with a message saying so. Before from() only route options and route-scope wrappers
// exist (a step there does not compile either). Errors the type system cannot see are rc::errors
// thrown while building: a wrapper with nothing after it (RC2001), a route without from()
// (RC2002), invalid options (RC5003, at the wrapper call).
//
// Builders are moved along the chain (methods are &&-qualified); keep one in a variable with
// `auto b = rc::craft()...;` and continue with `std::move(b).to(...)`.
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "rc/endpoint.hpp"
#include "rc/error.hpp"
#include "rc/route.hpp"
#include "rc/steps.hpp"
#include "rc/wrappers/cache.hpp"
#include "rc/wrappers/circuit_breaker.hpp"
#include "rc/wrappers/concurrency.hpp"
#include "rc/wrappers/delay.hpp"
#include "rc/wrappers/error_handler.hpp"
#include "rc/wrappers/rate_limit.hpp"
#include "rc/wrappers/retry.hpp"
#include "rc/wrappers/slow_down.hpp"
#include "rc/wrappers/throttle.hpp"
#include "rc/wrappers/timeout.hpp"

namespace rc {

/// The body type before from(): there is none yet.
struct no_body {};

template <class Body>
class route_builder;

route_builder<no_body> craft();

namespace detail {
template <class T>
inline constexpr bool always_false = false;

template <class S>
concept typed_source = std::derived_from<S, source_base> && requires {
  typename S::body_type;
};
template <class D>
concept destination_object = std::derived_from<D, destination_base>;

/// Extension point for gates defined outside this header (slow_down, rate_limit): an options
/// type with `make(options, inner, scope)` found by ADL.
template <class Options>
concept gate_options = requires(Options o, std::unique_ptr<rc::step> inner) {
  { make_gate(std::move(o), std::move(inner), scope::step) } -> std::same_as<std::unique_ptr<rc::step>>;
};
}  // namespace detail

template <class Body>
class route_builder {
  static constexpr bool has_from = !std::is_same_v<Body, no_body>;

 public:
  using body_type = Body;
  using learn_fn = std::function<void(const std::type_info&)>;

  route_builder(route_builder&&) noexcept = default;
  route_builder& operator=(route_builder&&) noexcept = default;

  // ---- route options (before from) ------------------------------------------------------
  route_builder&& id(std::string value) && {
    require_before_from("id");
    def_.id = std::move(value);
    return std::move(*this);
  }
  route_builder&& title(std::string value) && {
    require_before_from("title");
    def_.title = std::move(value);
    return std::move(*this);
  }
  route_builder&& description(std::string value) && {
    require_before_from("description");
    def_.description = std::move(value);
    return std::move(*this);
  }

  /// What a record that a parsing source (rc::json, rc::jsonl, rc::csv) cannot parse does:
  /// fail (default, RC5016), drop ("parse-failed") or abort (fail, then the source stops).
  /// See rc/parse.hpp and docs/data.md.
  route_builder&& on_parse_error(parse_error mode) && {
    require_before_from("on_parse_error");
    def_.on_parse_error = mode;
    return std::move(*this);
  }

  // ---- wrappers: route scope before from(), step scope (the next step) after ----------------
  route_builder&& throttle(throttle_options o) && {
    o.validate();
    if constexpr (!has_from) {
      def_.gates.push_back(make_throttle(std::move(o), nullptr, scope::route));
    } else {
      push_pending("throttle", [o = std::move(o)](std::unique_ptr<rc::step> inner) mutable {
        return make_throttle(std::move(o), std::move(inner), scope::step);
      });
    }
    return std::move(*this);
  }

  route_builder&& retry(retry_options o = {}) && {
    o.validate();
    return std::move(*this).wrapper_call("retry", route_layer::retry, [o = std::move(o)](auto inner, scope s) {
      return make_retry(o, std::move(inner), s);
    });
  }

  /// Fails the next step (after from()) or each run of the pipeline (before from(), one deadline
  /// per retry attempt) with RC5011 once `d` has passed, cancelling the work inside.
  route_builder&& timeout(duration d) && { return std::move(*this).timeout(timeout_options{.after = d}); }
  route_builder&& timeout(timeout_options o) && {
    o.validate();
    return std::move(*this).wrapper_call("timeout", route_layer::timeout, [o = std::move(o)](auto inner, scope s) {
      return make_timeout(o, std::move(inner), s);
    });
  }

  /// A bulkhead: at most `max` runs of the next step (after from()) or of the pipeline (before
  /// from(), innermost; calls stack, the first declared outermost) at once; the rest queue or
  /// are refused with RC5026.
  route_builder&& concurrency(concurrency_options o) && {
    o.validate();
    return std::move(*this).wrapper_call(
        "concurrency", route_layer::concurrency,
        [o = std::move(o)](auto inner, scope s) { return make_concurrency(o, std::move(inner), s); });
  }

  /// Catches failures and decides what follows (rc/wrappers/error_handler.hpp): the handler
  /// takes (const rc::error&, rc::exchange&) and returns an rc::recovery (a body converts) or an
  /// rc::task<rc::recovery>. Before from(): the whole run, gates included; after: the next step.
  template <class H>
  route_builder&& error(H handler) && {
    static_assert(std::is_invocable_v<H&, const rc::error&, exchange&>,
                  "error(): the handler must take (const rc::error&, rc::exchange&)");
    using R = std::invoke_result_t<H&, const rc::error&, exchange&>;
    // A std::function or a function pointer may be empty; a lambda never is (and testing one
    // through its conversion to a function pointer only draws a warning).
    if constexpr (std::is_pointer_v<H> || requires { handler.operator bool(); })
      if (!static_cast<bool>(handler)) invalid_option("error", "handler", "a callable", "an empty function");
    error_options o;
    if constexpr (std::is_same_v<std::decay_t<R>, task<recovery>>) {
      o.async_handler = std::move(handler);
    } else {
      static_assert(std::is_convertible_v<R, recovery>,
                    "error(): the handler must return rc::recovery (or a body, or rc::task<rc::recovery>)");
      o.handler = [h = std::move(handler)](const rc::error& e, exchange& ex) mutable -> recovery { return h(e, ex); };
    }
    o.validate();
    auto body_type = std::make_shared<const std::type_info*>(nullptr);
    return std::move(*this).wrapper_call(
        "error", route_layer::error,
        [o = std::move(o), body_type](auto inner, scope s) {
          return make_error_handler(o, std::move(inner), s, body_type);
        },
        [body_type](const std::type_info& t) { *body_type = &t; });
  }

  /// Fast-fails (RC5025, or the fallback) while the downstream keeps failing
  /// (rc/wrappers/circuit_breaker.hpp).
  route_builder&& circuit_breaker(circuit_breaker_options o) && {
    o.validate();
    auto body_type = std::make_shared<const std::type_info*>(nullptr);
    return std::move(*this).wrapper_call(
        "circuit_breaker", route_layer::circuit_breaker,
        [o = std::move(o), body_type](auto inner, scope s) {
          return make_circuit_breaker(o, std::move(inner), s, body_type);
        },
        [body_type](const std::type_info& t) { *body_type = &t; });
  }

  /// Caches the next step's body (route scope: the route's final body) by key
  /// (rc/wrappers/cache.hpp).
  route_builder&& cache(cache_options o = {}) && {
    o.validate();
    return std::move(*this).wrapper_call("cache", route_layer::cache, [o = std::move(o)](auto inner, scope s) {
      return make_cache(o, std::move(inner), s);
    });
  }

  /// Wrappers defined elsewhere plug in here. Before from(): a route-scope wrapper at `layer` of
  /// the fixed chain (route_layer; one per layer, the last call wins, except concurrency, which
  /// stacks with the first declared outermost). After from(): wraps the next step.
  /// `make(inner, scope)` builds the wrapper; options are validated by the caller, at the call.
  /// `learn(type)`, when given, is told the body type the wrapped part produces (the next step's
  /// in step scope, the route's final one in route scope) once the builder knows it.
  template <class Make>
  route_builder&& wrapper_call(const char* name, route_layer layer, Make make, learn_fn learn = {}) && {
    static_assert(std::is_invocable_r_v<std::unique_ptr<rc::step>, const Make&, std::unique_ptr<rc::step>, scope>,
                  "wrapper_call(): make(inner, scope) must return std::unique_ptr<rc::step>");
    if constexpr (!has_from) {
      if (layer == route_layer::gate) {
        def_.gates.push_back(make(nullptr, scope::route));
        return std::move(*this);
      }
      if (layer != route_layer::concurrency)
        std::erase_if(def_.wrappers, [layer](const route_wrapper& w) { return w.layer == layer; });
      if (learn) route_learn_.push_back(std::move(learn));
      def_.wrappers.push_back({layer, [make = std::move(make)](std::unique_ptr<rc::step> tail) {
                                 return make(std::move(tail), scope::route);
                               }});
    } else {
      (void)layer;
      push_pending(
          name,
          [make = std::move(make)](std::unique_ptr<rc::step> inner) { return make(std::move(inner), scope::step); },
          std::move(learn));
    }
    return std::move(*this);
  }

  route_builder&& delay(duration d) && {
    if constexpr (!has_from) {
      throw rc::error(errc::invalid_dsl, "delay() has no route scope: place it after from(), before the step to delay");
    } else {
      delay_options o{d};
      o.validate();
      push_pending("delay", [o](std::unique_ptr<rc::step> inner) { return make_delay(o, std::move(inner)); });
    }
    return std::move(*this);
  }

  /// Progressive delay per key and window (express-slow-down). Route scope: a gate at the
  /// throttle position, in declaration order with the other gates; step scope: the next step.
  route_builder&& slow_down(slow_down_options o) && { return std::move(*this).gate(std::move(o), "slow_down"); }

  /// Hard limit per key and window (express-rate-limit): a refusal fails fast with RC5013. Scopes
  /// as slow_down; behind a slow_down it counts an exchange when its delay is over.
  route_builder&& rate_limit(rate_limit_options o) && { return std::move(*this).gate(std::move(o), "rate_limit"); }

  /// Gates defined elsewhere plug in here: an options type with an ADL `make_gate(options, inner,
  /// scope)` (see rc/wrappers/slow_down.hpp).
  template <detail::gate_options Options>
  route_builder&& gate(Options o, const char* name) && {
    validate_gate(o);
    if constexpr (!has_from) {
      def_.gates.push_back(make_gate(std::move(o), nullptr, scope::route));
    } else {
      push_pending(name, [o = std::move(o)](std::unique_ptr<rc::step> inner) mutable {
        return make_gate(std::move(o), std::move(inner), scope::step);
      });
    }
    return std::move(*this);
  }

  // ---- from -------------------------------------------------------------------------------
  template <class S>
  auto from(S src) && {
    if constexpr (has_from) {
      static_assert(detail::always_false<S>,
                    "from(): a route has exactly one from(); start another route with rc::craft()");
    } else {
      static_assert(detail::typed_source<S>, "from(): the argument is not a source (see rc/components.hpp)");
      using T = typename S::body_type;
      route_builder<T> next(std::move(def_), std::move(route_learn_));
      next.def_.source = std::make_unique<S>(std::move(src));
      return next;
    }
  }

  // ---- steps ------------------------------------------------------------------------------
  /// The function's return value becomes the body; its type is the body type from here on.
  /// Takes the body (by value, reference or const reference), optionally the exchange too.
  template <class F>
  auto transform(F f) && {
    require_from<F>();
    if constexpr (std::is_invocable_v<F&, Body&&, exchange&>) {
      using Out = std::decay_t<std::invoke_result_t<F&, Body&&, exchange&>>;
      return std::move(*this).template append_transform<Out>(std::move(f));
    } else if constexpr (std::is_invocable_v<F&, Body&&>) {
      using Out = std::decay_t<std::invoke_result_t<F&, Body&&>>;
      return std::move(*this).template append_transform<Out>(std::move(f));
    } else {
      static_assert(detail::always_false<F>,
                    "transform(): the function cannot be called with the body type of the previous step");
      return std::move(*this);
    }
  }

  /// Works on the whole exchange in place (headers, body); the body type stays.
  template <class F>
  route_builder&& process(F f) && {
    require_from<F>();
    static_assert(std::is_invocable_v<F&, exchange&>, "process(): the function must take rc::exchange&");
    append(std::make_unique<process_step<F>>(std::move(f)));
    return std::move(*this);
  }

  /// Keeps the exchange when the predicate is true; drops it ("filtered") otherwise.
  template <class P>
  route_builder&& filter(P pred) && {
    require_from<P>();
    static_assert(std::is_invocable_r_v<bool, P&, const Body&>,
                  "filter(): the predicate must take the body (const Body&) and return bool");
    append(std::make_unique<filter_step<Body, P>>(std::move(pred)));
    return std::move(*this);
  }

  /// Sets one header to a value, or to what `fn(const exchange&)` returns.
  template <class V>
  route_builder&& header(std::string key, V value) && {
    require_from<V>();
    check_header_key(key);
    if constexpr (std::is_invocable_v<V&, const exchange&>)
      append(std::make_unique<header_step<V>>(std::move(key), std::move(value)));
    else {
      auto fixed = [v = nlohmann::json(std::move(value))](const exchange&) { return v; };
      append(std::make_unique<header_step<decltype(fixed)>>(std::move(key), std::move(fixed)));
    }
    return std::move(*this);
  }

  /// Sends the exchange to a destination (body unchanged), or calls a function with the body
  /// (a function returning a Body replaces it).
  template <class D>
  route_builder&& to(D dest) && {
    require_from<D>();
    if constexpr (detail::destination_object<D>) {
      append(std::make_unique<to_step>(std::make_unique<D>(std::move(dest))));
    } else if constexpr (std::is_invocable_v<D&, Body&>) {
      append(std::make_unique<call_step<Body, D>>(std::move(dest)));
    } else {
      static_assert(detail::always_false<D>,
                    "to(): expected a destination (rc::log(), rc::spy<T>(), ...) or a function taking the body");
    }
    return std::move(*this);
  }

  /// Request/reply: sends the body to an endpoint with `call()` (rc::direct) and makes the reply's
  /// body, of type Reply, the body from here on.
  template <class Reply, class D>
  route_builder<Reply> request(D endpoint) && {
    require_from<D>();
    append<Reply>(std::make_unique<request_step<Reply, D>>(std::move(endpoint)));
    route_builder<Reply> next(std::move(def_), std::move(route_learn_));
    return next;
  }

  /// Sends a copy of the exchange (fresh id, same correlation) to a destination, detached; the
  /// route goes on at once. drain() waits for it.
  template <class D>
  route_builder&& tap(D dest) && {
    require_from<D>();
    static_assert(detail::destination_object<D>, "tap(): expected a destination");
    static_assert(std::is_copy_constructible_v<Body>, "tap(): the body type must be copyable");
    append(std::make_unique<tap_step>(std::make_unique<D>(std::move(dest))));
    return std::move(*this);
  }

  /// Appends any engine step (extension point for components with their own step types).
  route_builder&& use(std::unique_ptr<rc::step> s) && {
    require_from<route_builder>();
    append(std::move(s));
    return std::move(*this);
  }

  // ---- build ------------------------------------------------------------------------------
  route_definition build() && {
    if constexpr (!has_from) {
      throw rc::error(errc::missing_from,
                      fmt::format("route \"{}\" has no from(): every route needs a source", def_.id));
    } else {
      if (!pending_.empty())
        throw rc::error(errc::invalid_dsl,
                        fmt::format("{}() has no step after it: a step-scope wrapper wraps the next step, so "
                                    "add the step it should wrap (route \"{}\")",
                                    pending_.front().name, def_.id));
      if (def_.id.empty()) def_.id = exchange().id();
      for (auto& learn : route_learn_) learn(typeid(Body));
      return std::move(def_);
    }
  }

 private:
  template <class>
  friend class route_builder;
  friend route_builder<no_body> craft();

  struct pending_wrapper {
    const char* name;
    std::function<std::unique_ptr<rc::step>(std::unique_ptr<rc::step>)> wrap;
    learn_fn learn;  // told the wrapped step's body type, when it wants it
  };

  route_builder() = default;
  explicit route_builder(route_definition def, std::vector<learn_fn> route_learn = {})
      : def_(std::move(def)), route_learn_(std::move(route_learn)) {}

  void require_before_from(const char* what) const {
    if constexpr (has_from)
      throw rc::error(errc::invalid_dsl,
                      fmt::format("{}() must come before from(): it configures the route, not a step", what));
  }

  template <class Marker>
  static constexpr void require_from() {
    static_assert(has_from || detail::always_false<Marker>,
                  "steps need a body: call from() before adding steps (before from() only route options "
                  "and route-scope wrappers are allowed)");
  }

  template <class W>
  void push_pending(const char* name, W wrap, learn_fn learn = {}) {
    pending_.push_back({name, std::move(wrap), std::move(learn)});
  }

  /// Folds the pending wrappers around `s` (first declared outermost) and appends it. `Out` is
  /// the body type after `s`.
  template <class Out = Body>
  void append(std::unique_ptr<rc::step> s) {
    for (auto it = pending_.rbegin(); it != pending_.rend(); ++it) {
      if (it->learn) it->learn(typeid(Out));
      s = it->wrap(std::move(s));
    }
    pending_.clear();
    def_.steps.push_back(std::move(s));
  }

  template <class Out, class F>
  route_builder<Out> append_transform(F f) && {
    static_assert(!std::is_void_v<Out>, "transform(): the function must return the new body");
    append<Out>(std::make_unique<transform_step<Body, Out, F>>(std::move(f)));
    route_builder<Out> next(std::move(def_), std::move(route_learn_));
    return next;
  }

  template <class O>
  static void validate_gate(const O& o) {
    if constexpr (requires { o.validate(); }) o.validate();
  }

  route_definition def_;
  std::vector<pending_wrapper> pending_;
  std::vector<learn_fn> route_learn_;  // route-scope wrappers, told the route's final body type at build()
};

inline route_builder<no_body> craft() { return route_builder<no_body>(); }

}  // namespace rc
