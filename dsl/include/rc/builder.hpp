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
#include <optional>
#include <ranges>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "rc/choice.hpp"
#include "rc/endpoint.hpp"
#include "rc/error.hpp"
#include "rc/log_step.hpp"
#include "rc/operations.hpp"
#include "rc/route.hpp"
#include "rc/shaping.hpp"
#include "rc/split.hpp"
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

namespace detail {
/// The builder's split nesting, at the type level: outside any split() ...
struct top_level {};
/// ... or inside one, started on a body of type OuterBody at level OuterLevel.
template <class OuterBody, class OuterLevel>
struct split_level {
  using outer_body = OuterBody;
  using outer_level = OuterLevel;
};
/// ... or inside a choice() or multicast() branch that started on a body of type Start.
template <class Start>
struct branch_level {
  using start = Start;
};
template <class Level>
inline constexpr bool in_split = false;
template <class OuterBody, class OuterLevel>
inline constexpr bool in_split<split_level<OuterBody, OuterLevel>> = true;
template <class Level>
inline constexpr bool in_branch = false;
template <class Start>
inline constexpr bool in_branch<branch_level<Start>> = true;
template <class OuterBody, class OuterLevel>
inline constexpr bool in_branch<split_level<OuterBody, OuterLevel>> = in_branch<OuterLevel>;
/// The parent's body type at the end of the route: the body at the outermost split() still open.
template <class Body, class Level>
struct final_body {
  using type = Body;
};
template <class Body, class OuterBody, class OuterLevel>
struct final_body<Body, split_level<OuterBody, OuterLevel>> : final_body<OuterBody, OuterLevel> {};

/// A split() not yet closed by aggregate(): the steps before it, and the typed part of the plan.
struct open_split {
  std::vector<std::unique_ptr<rc::step>> outer_steps;
  split_plan plan;
};

/// A batch() of the builder: where it was called in the top-level steps, and how to make its
/// step from the steps after it (at build()).
struct batch_mark {
  std::size_t at;
  std::function<std::unique_ptr<rc::step>(std::vector<std::unique_ptr<rc::step>>)> make;
};

/// Yields the elements of a range as children's bodies, moving them out when `Move`.
template <class R, bool Move>
class range_source final : public split_source {
 public:
  using element = std::ranges::range_value_t<std::remove_reference_t<R>>;
  explicit range_source(R&& r) : range_(std::forward<R>(r)) {}
  bool next(any_body& out) override {
    if (!it_) it_.emplace(std::ranges::begin(range_));
    if (*it_ == std::ranges::end(range_)) return false;
    if constexpr (Move)
      out.emplace<element>(std::ranges::iter_move(*it_));
    else
      out.emplace<element>(**it_);
    ++*it_;
    return true;
  }

 private:
  R range_;  // the range itself, or a reference to the parent's body
  std::optional<std::ranges::iterator_t<std::remove_reference_t<R>>> it_;
};
}  // namespace detail

template <class Body, class Level = detail::top_level>
class route_builder;

route_builder<no_body> craft();
template <class Body>
route_builder<Body, detail::branch_level<Body>> branch();

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

// ---- choice() clauses (rc/choice.hpp, docs/operations.md) -------------------------------------
namespace detail {
/// The body type after halt(): the branch drops the exchange ("halted") and never goes on, so its
/// end type does not count among the branches' (choice()).
struct halted {};

template <class P, class B>
struct when_clause {
  using branch_type = B;
  P pred;
  B branch;
  std::string label;
};
template <class B>
struct otherwise_clause {
  using branch_type = B;
  B branch;
  std::string label;
};
template <class T>
inline constexpr bool is_when = false;
template <class P, class B>
inline constexpr bool is_when<when_clause<P, B>> = true;
template <class T>
inline constexpr bool is_otherwise = false;
template <class B>
inline constexpr bool is_otherwise<otherwise_clause<B>> = true;

template <class T>
struct builder_traits {
  static constexpr bool is_builder = false;
};
template <class B, class L>
struct builder_traits<route_builder<B, L>> {
  static constexpr bool is_builder = true;
  using body = B;
  using level = L;
};

/// The first of Ends that is not `halted`, or Default when every one is.
template <class Default, class... Ends>
struct first_live {
  using type = Default;
};
template <class Default, class E, class... Ends>
struct first_live<Default, E, Ends...> {
  using type = std::conditional_t<std::is_same_v<E, halted>, typename first_live<Default, Ends...>::type, E>;
};
}  // namespace detail

/// A choice() branch taken when `pred(body)` (or `pred(body, exchange)`) returns true. `branch` is
/// rc::branch<Body>() with steps, a function taking that builder and returning it with steps, or
/// a destination. `label` names the branch in events (default "when#<n>", counting from 1).
template <class P, class B>
detail::when_clause<P, B> when(P pred, B branch, std::string label = {}) {
  return {std::move(pred), std::move(branch), std::move(label)};
}
/// The choice() branch taken when no when() is; at most one, last.
template <class B>
detail::otherwise_clause<B> otherwise(B branch, std::string label = "otherwise") {
  return {std::move(branch), std::move(label)};
}

template <class Body, class Level>
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
      auto next = std::move(*this).template rebind<T, Level>();
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
      using R = std::invoke_result_t<F&, Body&&, exchange&>;
      return std::move(*this).template append_transform<R>(std::move(f));
    } else if constexpr (std::is_invocable_v<F&, Body&&>) {
      using R = std::invoke_result_t<F&, Body&&>;
      return std::move(*this).template append_transform<R>(std::move(f));
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
    if constexpr (detail::is_task_v<std::invoke_result_t<F&, exchange&>>) {
      static_assert(std::is_void_v<detail::task_value_t<std::invoke_result_t<F&, exchange&>>>,
                    "process(): a coroutine process returns rc::task<void> (it works on the exchange in place)");
      append(std::make_unique<async_process_step<F>>(std::move(f)));
    } else {
      append(std::make_unique<process_step<F>>(std::move(f)));
    }
    return std::move(*this);
  }

  /// Keeps or drops the exchange. The predicate takes (const Body&) or (const Body&, const
  /// rc::exchange&) and returns bool (false drops as "filtered"), rc::keep() / rc::drop("reason"),
  /// std::optional<std::string> (a reason drops), or an rc::task of one of these. A throw is RC5001.
  template <class P>
  route_builder&& filter(P pred) && {
    require_from<P>();
    if constexpr (std::is_invocable_v<P&, const Body&, const exchange&> || std::is_invocable_v<P&, const Body&>) {
      using R = detail::task_value_t<detail::filter_call_t<Body, P>>;
      static_assert(detail::filter_result_v<R>,
                    "filter(): the predicate must return bool, rc::keep()/rc::drop(reason), "
                    "std::optional<std::string> or an rc::task of one of them");
      append(std::make_unique<filter_step<Body, P>>(std::move(pred)));
    } else {
      static_assert(detail::always_false<P>,
                    "filter(): the predicate must take the body (const Body&), optionally followed by "
                    "const rc::exchange&");
    }
    return std::move(*this);
  }

  /// Checks the body and may coerce it: f takes (const Body&) or (const Body&, const rc::exchange&)
  /// and returns the body to go on with (any type; it becomes the body type), or void to only
  /// check, or an rc::task of either. A throw is RC5002 with the thrown message (an rc::error
  /// passes unchanged); the body is left as it was.
  template <class F>
  auto validate(F f) && {
    require_from<F>();
    if constexpr (std::is_invocable_v<F&, const Body&, const exchange&> || std::is_invocable_v<F&, const Body&>) {
      using R = detail::task_value_t<detail::validator_call_t<Body, F>>;
      using Out = std::conditional_t<std::is_void_v<R>, Body, std::decay_t<R>>;
      append<Out>(std::make_unique<validate_step<Body, Out, F>>(std::move(f)));
      return std::move(*this).template rebind<Out, Level>();
    } else {
      static_assert(detail::always_false<F>,
                    "validate(): the validator must take the body as const Body& (or by value), optionally "
                    "followed by const rc::exchange&; it must not move from the body");
      return std::move(*this);
    }
  }

  /// Fetches something with the body and lets it replace the body (new body type: the result's).
  /// `target` is an endpoint with call() (rc::direct, rc::http: name the reply type,
  /// enrich<Reply>(endpoint)) or a callable taking (const Body&) or (const Body&, rc::exchange&)
  /// that returns the result or an rc::task of it.
  template <class Reply = void, class T>
  auto enrich(T target) && {
    return std::move(*this).template enrich<Reply>(std::move(target), detail::replace_body{});
  }

  /// enrich(target), combined by `agg`: (Body&& original, Result&& result[, rc::exchange&]) returning
  /// the new body, or (Body& original, Result&& result[, rc::exchange&]) returning void to edit the
  /// body in place. Ready-made: rc::only(get[, into]) and rc::none().
  template <class Reply = void, class T, class A>
  auto enrich(T target, A agg) && {
    require_from<T>();
    if constexpr (detail::request_endpoint<T>) {
      static_assert(!std::is_void_v<Reply>,
                    "enrich(endpoint): name the type of the endpoint's reply body, enrich<Reply>(endpoint)");
      if constexpr (requires { typename T::body_type; })
        static_assert(std::is_same_v<typename T::body_type, Body>,
                      "enrich(endpoint): the endpoint takes another body type than the current body");
      return std::move(*this).template append_enrich<Reply>(std::move(target), std::move(agg));
    } else if constexpr (std::is_invocable_v<T&, const Body&, exchange&> || std::is_invocable_v<T&, const Body&>) {
      using R = std::decay_t<
          detail::task_value_t<decltype(detail::call_fetcher<Body>(std::declval<T&>(), std::declval<exchange&>()))>>;
      static_assert(!std::is_void_v<R>, "enrich(f): the fetcher must return the result (or an rc::task of it)");
      static_assert(std::is_void_v<Reply> || std::is_same_v<Reply, R>,
                    "enrich<Reply>(f): Reply differs from what the fetcher returns");
      return std::move(*this).template append_enrich<R>(std::move(target), std::move(agg));
    } else {
      static_assert(detail::always_false<T>,
                    "enrich(): the target must be an endpoint with call() (rc::direct, rc::http) or a callable "
                    "taking the body (const Body&), optionally followed by rc::exchange&");
      return std::move(*this);
    }
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
  route_builder<Reply, Level> request(D endpoint) && {
    require_from<D>();
    append<Reply>(std::make_unique<request_step<Reply, D>>(std::move(endpoint)));
    return std::move(*this).template rebind<Reply, Level>();
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

  /// Logs the exchange through the log sink (rc/log_step.hpp), body unchanged: "[route] id text",
  /// the text being `f(const Body&, const rc::exchange&)` or `f(const Body&)` (a string), or the
  /// body as JSON. Step label "log".
  route_builder&& log(log_level level = log_level::info) && {
    return std::move(*this).append_log("log", level, default_log_text{});
  }
  template <class F>
  route_builder&& log(F formatter, log_level level = log_level::info) && {
    return std::move(*this).append_log("log", level, std::move(formatter));
  }
  /// The same at level debug; without a formatter the text is the body and the headers. Step
  /// label "debug".
  route_builder&& debug() && { return std::move(*this).append_log("debug", log_level::debug, default_log_text{}); }
  template <class F>
  route_builder&& debug(F formatter) && {
    return std::move(*this).append_log("debug", log_level::debug, std::move(formatter));
  }

  /// Appends any engine step (extension point for components with their own step types).
  route_builder&& use(std::unique_ptr<rc::step> s) && {
    require_from<route_builder>();
    append(std::move(s));
    return std::move(*this);
  }

  // ---- split / aggregate (rc/split.hpp, docs/operations.md) --------------------------------
  /// Each element of the range `f(body)` becomes a child exchange that runs the steps up to the
  /// matching aggregate() (or, without one, to the end of the route); the body type from here on
  /// is the element type. At most `o.parallelism` children run at once (default 1).
  template <class F>
  auto split(F f, split_options o = {}) && {
    require_from<F>();
    static_assert(std::is_invocable_v<F&, const Body&>, "split(f): f must take the body (const Body&)");
    using R = std::invoke_result_t<F&, const Body&>;
    static_assert(std::ranges::input_range<std::remove_reference_t<R>>,
                  "split(f): f must return a range (std::vector<T>, a view, ...) of the children's bodies");
    using Range = std::conditional_t<std::is_lvalue_reference_v<R>, R, std::remove_cvref_t<R>>;
    using Element = std::ranges::range_value_t<std::remove_reference_t<R>>;
    static_assert(!std::is_same_v<Element, exchange>, "split(f): f returns the children's bodies, not exchanges");
    struct opener {
      F f;
      std::unique_ptr<split_source> operator()(exchange& parent, bool) {
        // A range returned by reference (into the body) is copied from; one returned by value is
        // the split's own, moved from.
        return std::make_unique<detail::range_source<Range, !std::is_lvalue_reference_v<R>>>(
            f(static_cast<const Body&>(parent.body<Body>())));
      }
    };
    return std::move(*this).template open_split<Element>(opener{std::move(f)}, o);
  }

  /// A body that is a range splits per element (see split(f)).
  auto split(split_options o = {}) && {
    require_from<split_options>();
    if constexpr (!std::ranges::input_range<Body>) {
      static_assert(detail::always_false<Body>,
                    "split(): without a function the body must be a range (std::vector<T>, ...); "
                    "otherwise pass split(f) returning one");
      return std::move(*this);
    } else {
      using Element = std::ranges::range_value_t<Body>;
      struct opener {
        std::unique_ptr<split_source> operator()(exchange& parent, bool consume) {
          // The body is replaced by the aggregate afterwards: its elements may move out. Without
          // an aggregate the parent keeps its body, so each child gets a copy.
          Body& b = parent.body<Body>();
          if (consume) return std::make_unique<detail::range_source<Body&, true>>(b);
          if constexpr (std::is_copy_constructible_v<Element>)
            return std::make_unique<detail::range_source<Body&, false>>(b);
          else
            return std::make_unique<detail::range_source<Body&, true>>(b);
        }
      };
      return std::move(*this).template open_split<Element>(opener{}, o);
    }
  }

  /// Joins the children of the nearest open split(): the body becomes a std::vector of the
  /// bodies of the children that completed, in split order (failed or dropped children are
  /// missing; none completed is RC5002). The parent's identity and headers are as before split().
  auto aggregate() && {
    static_assert(detail::in_split<Level>,
                  "aggregate(): there is no split() before it; aggregate() joins the children of the nearest "
                  "split()");
    if constexpr (detail::in_split<Level>) {
      return std::move(*this).template close_aggregate<std::vector<Body>>(
          [](exchange& parent, std::vector<Body>&& bodies) {
            if (bodies.empty())
              throw rc::error(errc::validation,
                              "aggregate(): no child completed (every child failed or was dropped); the default "
                              "aggregator needs at least one (pass aggregate(f) to handle none)");
            parent.set_body(std::move(bodies));
          });
    } else {
      return std::move(*this);
    }
  }

  /// Joins as aggregate(), then `f(std::vector<Body>&&)` (possibly empty) becomes the body.
  template <class F>
  auto aggregate(F f) && {
    static_assert(detail::in_split<Level>,
                  "aggregate(f): there is no split() before it; aggregate() joins the children of the nearest "
                  "split()");
    static_assert(std::is_invocable_v<F&, std::vector<Body>&&>,
                  "aggregate(f): f must take the children's bodies as std::vector<Body>&& (Body: the body type "
                  "before aggregate)");
    if constexpr (detail::in_split<Level> && std::is_invocable_v<F&, std::vector<Body>&&>) {
      using Out = std::decay_t<std::invoke_result_t<F&, std::vector<Body>&&>>;
      static_assert(!std::is_void_v<Out>, "aggregate(f): f must return the new body");
      return std::move(*this).template close_aggregate<Out>(
          [f = std::move(f)](exchange& parent, std::vector<Body>&& bodies) mutable {
            parent.set_body(f(std::move(bodies)));
          });
    } else {
      return std::move(*this);
    }
  }

  // ---- choice / multicast (rc/choice.hpp, docs/operations.md) -------------------------------
  /// Runs the first branch whose when() predicate holds, else the otherwise() branch, else drops
  /// the exchange ("unmatched"). The route goes on after the choice with the branches' end body
  /// type: every branch that does not halt() must end in the same one. A step-scope wrapper
  /// written before choice() wraps the selection (the predicates) only, not the branch run.
  template <class... Clauses>
  auto choice(Clauses... clauses) && {
    require_from<route_builder>();
    static_assert(sizeof...(Clauses) > 0, "choice(): give at least one rc::when(...) or rc::otherwise(...)");
    static_assert(((detail::is_when<Clauses> || detail::is_otherwise<Clauses>)&&...),
                  "choice(): every argument must be rc::when(predicate, branch) or rc::otherwise(branch)");
    constexpr std::size_t otherwise_count = (std::size_t{detail::is_otherwise<Clauses>} + ... + 0);
    static_assert(otherwise_count <= 1, "choice(): at most one otherwise() (it takes every exchange no when() takes)");
    using Last = typename decltype((std::type_identity<Clauses>{}, ...))::type;
    static_assert(otherwise_count == 0 || detail::is_otherwise<Last>, "choice(): otherwise() must come last");
    using Out = typename detail::first_live<Body, typename detail::builder_traits<decltype(make_branch(
                                                      std::declval<typename Clauses::branch_type>()))>::body...>::type;
    static_assert(((std::is_same_v<typename detail::builder_traits<decltype(make_branch(
                                       std::declval<typename Clauses::branch_type>()))>::body,
                                   detail::halted> ||
                    std::is_same_v<typename detail::builder_traits<decltype(make_branch(
                                       std::declval<typename Clauses::branch_type>()))>::body,
                                   Out>)&&...),
                  "choice(): every branch must end in the same body type (the route goes on after choice() with "
                  "it); end the branches that differ with a transform() to that type");
    std::vector<choice_branch> branches;
    branches.reserve(sizeof...(Clauses));
    std::size_t whens = 0;
    (branches.push_back(to_choice_branch(std::move(clauses), whens)), ...);
    // The wrappers written before choice() wrap the selection only (folded as append() would).
    std::function<std::unique_ptr<rc::step>(std::unique_ptr<rc::step>)> wrap;
    if (!pending_.empty()) {
      wrap = [pending = std::move(pending_)](std::unique_ptr<rc::step> s) {
        for (auto it = pending.rbegin(); it != pending.rend(); ++it) {
          if (it->learn) it->learn(typeid(Body));
          s = it->wrap(std::move(s));
        }
        return s;
      };
      pending_.clear();
    }
    def_.steps.push_back(std::make_unique<choice_step>(std::move(branches), wrap));
    return std::move(*this).template rebind<Out, Level>();
  }

  /// Inside a choice() branch: drops the exchange with reason "halted"; nothing after it runs.
  route_builder<detail::halted, Level> halt() && {
    require_from<route_builder>();
    static_assert(detail::in_branch<Level>,
                  "halt(): only inside a choice() branch (rc::branch<Body>().halt()); to drop in the route use "
                  "filter()");
    append(std::make_unique<halt_step>());
    return std::move(*this).template rebind<detail::halted, Level>();
  }

  /// Runs every branch on its own clone of the exchange (deep-copied body, fresh id, the same
  /// correlation id, headers copied), concurrently and detached; the route goes on at once with
  /// the exchange unchanged. A branch that fails or drops affects its clone only. drain() and
  /// stop() wait for the clones. Branches are given as for choice() and may end in any type.
  template <class... Branches>
  route_builder&& multicast(Branches... branches) && {
    require_from<route_builder>();
    static_assert(sizeof...(Branches) > 0, "multicast(): give at least one branch");
    static_assert(std::is_copy_constructible_v<Body>,
                  "multicast(): the body type must be copyable (each branch gets its own copy)");
    std::vector<std::vector<std::unique_ptr<rc::step>>> subs;
    subs.reserve(sizeof...(Branches));
    (subs.push_back(branch_steps(make_branch(std::move(branches)), "multicast")), ...);
    append(std::make_unique<multicast_step>(std::move(subs)));
    return std::move(*this);
  }

  // ---- shaping: dedupe / sample / debounce / batch (rc/shaping.hpp, docs/operations.md) -----
  /// Drops ("duplicate") an exchange whose key is in flight or completed within `ttl`; the key
  /// is committed when the run completes and released when it fails or is dropped. Default key:
  /// a hash of the body's JSON form (a body without one needs `.key`, else RC5003).
  route_builder&& dedupe(dedupe_options o = {}) && {
    require_from<dedupe_options>();
    if (!o.key) {
      if constexpr (std::is_constructible_v<nlohmann::json, const Body&>)
        o.key = body_hash_key;
      else
        invalid_option("dedupe", "key", "given when the body does not convert to JSON", "none");
    }
    o.validate();
    append(make_dedupe(std::move(o)));
    return std::move(*this);
  }

  /// Passes every `every`-th exchange, or the first per `interval`; drops the rest ("sampled").
  route_builder&& sample(sample_options o) && {
    require_from<sample_options>();
    o.validate();
    append(make_sample(o));
    return std::move(*this);
  }

  /// Releases only the last exchange of a burst (per key), `wait` after its last arrival or
  /// `max_wait` after its first; the others drop ("debounced"). Cannot be wrapped (RC5003).
  route_builder&& debounce(debounce_options o) && {
    require_from<debounce_options>();
    o.validate();
    require_no_pending("debounce");
    append(make_debounce(std::move(o)));
    return std::move(*this);
  }

  /// Folds consecutive bodies into one std::vector<Body>, carried by a new exchange through the
  /// steps after it; flushed at `size`, `flush_interval` after its first body, or on stop.
  auto batch(batch_options o = {}) && {
    require_from<batch_options>();
    static_assert(!detail::in_split<Level>,
                  "batch(): not between split() and aggregate(); batch the parent before split() or after aggregate()");
    o.validate();
    require_no_pending("batch");
    batches_.push_back({def_.steps.size(), [o](std::vector<std::unique_ptr<rc::step>> sub) {
                          auto fold = [](exchange& batch, std::vector<any_body>&& bodies) {
                            std::vector<Body> out;
                            out.reserve(bodies.size());
                            for (auto& b : bodies) out.push_back(std::move(b.template get<Body>()));
                            batch.set_body(std::move(out));
                          };
                          return std::unique_ptr<rc::step>(std::make_unique<batch_step>(o, fold, std::move(sub)));
                        }});
    return std::move(*this).template rebind<std::vector<Body>, Level>();
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
      if (!splits_.empty() && has_route_cache())
        throw rc::error(errc::misconfigured,
                        fmt::format("route \"{}\": a route-scope cache() needs every split() closed by an "
                                    "aggregate() (it caches the route's final body)",
                                    def_.id));
      while (!splits_.empty()) close_split();  // split() without aggregate(): children run to the end
      if (!batches_.empty() && has_route_cache())
        throw rc::error(errc::misconfigured,
                        fmt::format("route \"{}\": a route-scope cache() cannot follow batch() (a batch is an exchange "
                                    "of its own)",
                                    def_.id));
      close_batches();
      if (def_.id.empty()) def_.id = exchange().id();
      for (auto& learn : route_learn_) learn(typeid(typename detail::final_body<Body, Level>::type));
      return std::move(def_);
    }
  }

 private:
  template <class, class>
  friend class route_builder;
  friend route_builder<no_body> craft();
  template <class B>
  friend route_builder<B, detail::branch_level<B>> branch();

  struct pending_wrapper {
    const char* name;
    std::function<std::unique_ptr<rc::step>(std::unique_ptr<rc::step>)> wrap;
    learn_fn learn;  // told the wrapped step's body type, when it wants it
  };

  route_builder() = default;

  /// The same route under construction, with another body type or split level.
  template <class B, class L>
  route_builder<B, L> rebind() && {
    route_builder<B, L> next;
    next.def_ = std::move(def_);
    next.route_learn_ = std::move(route_learn_);
    next.splits_ = std::move(splits_);
    next.batches_ = std::move(batches_);
    return next;
  }

  /// Each batch() takes the steps after it as its batch's pipeline (the last batch() first).
  void close_batches() {
    while (!batches_.empty()) {
      auto mark = std::move(batches_.back());
      batches_.pop_back();
      std::vector<std::unique_ptr<rc::step>> sub;
      for (std::size_t i = mark.at; i < def_.steps.size(); ++i) sub.push_back(std::move(def_.steps[i]));
      def_.steps.resize(mark.at);
      def_.steps.push_back(mark.make(std::move(sub)));
    }
  }

  /// A step-scope wrapper cannot wrap split() or aggregate() (RC5003).
  void require_no_pending(const char* what) const {
    if (!pending_.empty())
      throw rc::error(errc::misconfigured,
                      fmt::format("{}() cannot be wrapped by {}(): a step-scope wrapper wraps one step; place it "
                                  "before a step between split() and aggregate() (route \"{}\")",
                                  what, pending_.back().name, def_.id));
  }

  /// Turns the innermost open split into a split_step appended to the steps before it.
  void close_split() {
    detail::open_split open = std::move(splits_.back());
    splits_.pop_back();
    auto sub = std::move(def_.steps);
    def_.steps = std::move(open.outer_steps);
    def_.steps.push_back(std::make_unique<split_step>(std::move(open.plan), std::move(sub)));
  }

  template <class Element, class Opener>
  auto open_split(Opener opener, split_options o) && {
    o.validate();
    require_no_pending("split");
    detail::open_split open;
    open.outer_steps = std::move(def_.steps);
    def_.steps.clear();
    open.plan.parallelism = o.parallelism;
    open.plan.open = std::move(opener);
    splits_.push_back(std::move(open));
    return std::move(*this).template rebind<Element, detail::split_level<Body, Level>>();
  }

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

  template <class F>
  route_builder&& append_log(std::string_view label, log_level level, F f) && {
    require_from<F>();
    static_assert(std::is_same_v<F, default_log_text> || std::is_invocable_v<F&, const Body&, const exchange&> ||
                      std::is_invocable_v<F&, const Body&>,
                  "log() / debug(): the formatter must take (const Body&, const rc::exchange&) or (const Body&)");
    if constexpr (std::is_invocable_v<F&, const Body&, const exchange&>)
      static_assert(std::is_constructible_v<std::string, std::invoke_result_t<F&, const Body&, const exchange&>>,
                    "log() / debug(): the formatter must return a string");
    else if constexpr (std::is_invocable_v<F&, const Body&>)
      static_assert(std::is_constructible_v<std::string, std::invoke_result_t<F&, const Body&>>,
                    "log() / debug(): the formatter must return a string");
    append(std::make_unique<log_step<Body, F>>(label, level, std::move(f)));
    return std::move(*this);
  }

  /// R: what the function returns, the new body or an rc::task of it.
  template <class R, class F, class Out = std::decay_t<detail::task_value_t<R>>>
  route_builder<Out, Level> append_transform(F f) && {
    static_assert(!std::is_void_v<Out>, "transform(): the function must return the new body");
    if constexpr (detail::is_task_v<R>)
      append<Out>(std::make_unique<async_transform_step<Body, Out, F>>(std::move(f)));
    else
      append<Out>(std::make_unique<transform_step<Body, Out, F>>(std::move(f)));
    return std::move(*this).template rebind<Out, Level>();
  }

  template <class R, class T, class A>
  auto append_enrich(T target, A agg) && {
    constexpr auto form = detail::agg_form_of<Body, R, A>();
    static_assert(form != detail::agg_form::invalid,
                  "enrich(target, agg): agg must take (Body&& original, Result&& result) and return the new body, "
                  "or (Body& original, Result&& result) and return void (optionally followed by rc::exchange&)");
    if constexpr (form == detail::agg_form::invalid) {
      return std::move(*this);
    } else {
      using Out = typename detail::enriched_body<Body, R, A>::type;
      static_assert(!std::is_void_v<Out>, "enrich(target, agg): agg must return the new body, or edit it in place");
      append<Out>(std::make_unique<enrich_step<Body, R, T, A>>(std::move(target), std::move(agg)));
      return std::move(*this).template rebind<Out, Level>();
    }
  }

  template <class Out, class Fold>
  auto close_aggregate(Fold fold) && {
    require_no_pending("aggregate");
    splits_.back().plan.aggregate = [fold = std::move(fold)](exchange& parent, std::vector<any_body>& arrived) mutable {
      std::vector<Body> bodies;
      bodies.reserve(arrived.size());
      for (auto& b : arrived)
        if (b.template holds<Body>()) bodies.push_back(std::move(b.template get<Body>()));
      arrived.clear();
      fold(parent, std::move(bodies));
    };
    close_split();
    return std::move(*this).template rebind<Out, typename Level::outer_level>();
  }

  /// A choice() or multicast() branch as a branch builder started on Body: given as one, as a
  /// function extending one, or as a destination.
  template <class B>
  static auto make_branch(B b) {
    using start_builder = route_builder<Body, detail::branch_level<Body>>;
    if constexpr (detail::builder_traits<B>::is_builder) {
      using L = typename detail::builder_traits<B>::level;
      static_assert(!detail::in_split<L>,
                    "choice()/multicast(): a split() inside a branch must be closed by aggregate() in that branch");
      static_assert(detail::in_split<L> || std::is_same_v<L, detail::branch_level<Body>>,
                    "choice()/multicast(): a branch must start from the current body type: rc::branch<Body>() with "
                    "Body the body type at choice()/multicast()");
      return b;
    } else if constexpr (detail::destination_object<B>) {
      return rc::branch<Body>().to(std::move(b));
    } else if constexpr (std::is_invocable_v<B&, start_builder&&>) {
      using R = std::invoke_result_t<B&, start_builder&&>;
      static_assert(detail::builder_traits<std::decay_t<R>>::is_builder,
                    "choice()/multicast(): a branch function must return the builder it was given, with its steps");
      return make_branch(std::decay_t<R>(b(rc::branch<Body>())));
    } else {
      static_assert(detail::always_false<B>,
                    "choice()/multicast(): a branch is rc::branch<Body>() with steps, a function taking that "
                    "builder and returning it, or a destination");
      return rc::branch<Body>();
    }
  }

  /// The steps of a finished branch builder. A wrapper with no step after it wraps nothing: RC2001.
  template <class BB>
  static std::vector<std::unique_ptr<rc::step>> branch_steps(BB&& bb, const char* op) {
    if (!bb.pending_.empty())
      throw rc::error(errc::invalid_dsl,
                      fmt::format("{}() has no step after it in a {}() branch: a step-scope wrapper wraps the next "
                                  "step, so add the step it should wrap",
                                  bb.pending_.front().name, op));
    return std::move(bb.def_.steps);
  }

  template <class C>
  static choice_branch to_choice_branch(C c, std::size_t& whens) {
    choice_branch out;
    if constexpr (detail::is_when<C>) {
      ++whens;
      out.when = make_predicate(std::move(c.pred));
      out.label = c.label.empty() ? fmt::format("when#{}", whens) : std::move(c.label);
    } else {
      out.label = std::move(c.label);
    }
    out.steps = branch_steps(make_branch(std::move(c.branch)), "choice");
    return out;
  }

  template <class P>
  static std::function<bool(const exchange&)> make_predicate(P p) {
    if constexpr (std::is_invocable_r_v<bool, P&, const Body&, const exchange&>) {
      return [p = std::move(p)](const exchange& ex) mutable -> bool { return p(ex.body<Body>(), ex); };
    } else if constexpr (std::is_invocable_r_v<bool, P&, const Body&>) {
      return [p = std::move(p)](const exchange& ex) mutable -> bool { return p(ex.body<Body>()); };
    } else {
      static_assert(detail::always_false<P>,
                    "choice(): a when() predicate must take (const Body&) or (const Body&, const rc::exchange&) "
                    "and return bool");
      return {};
    }
  }

  template <class O>
  static void validate_gate(const O& o) {
    if constexpr (requires { o.validate(); }) o.validate();
  }

  bool has_route_cache() const {
    for (const auto& w : def_.wrappers)
      if (w.layer == route_layer::cache) return true;
    return false;
  }

  route_definition def_;
  std::vector<pending_wrapper> pending_;
  std::vector<learn_fn> route_learn_;       // route-scope wrappers, told the route's final body type at build()
  std::vector<detail::open_split> splits_;  // open split()s, innermost last

  std::vector<detail::batch_mark> batches_;  // batch()es, closed at build()
};

inline route_builder<no_body> craft() { return route_builder<no_body>(); }

/// A choice() or multicast() branch's builder, starting on the body type Body (the one at the
/// choice): `rc::branch<order>().transform(...).to(...)`.
template <class Body>
route_builder<Body, detail::branch_level<Body>> branch() {
  return route_builder<Body, detail::branch_level<Body>>();
}

}  // namespace rc
