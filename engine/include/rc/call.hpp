// rc::call_endpoint: a route that application code can call, with rc::context's send() and
// request() (co_await) or send_sync() and request_sync() (blocking; docs/operations.md, "Calling a
// route from code").
//
// The engine knows nothing of components: anything implementing call_endpoint and naming the body
// it takes as `body_type` can be called (rc::direct<T> does). The endpoint runs a fresh exchange
// through its route and returns the route's final exchange, or throws: the route's own failure
// (an rc::error with its code), or the endpoint's (no route serves it, the route dropped the
// exchange).
#pragma once

#include <concepts>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rc/error.hpp"
#include "rc/exchange.hpp"
#include "rc/task.hpp"

namespace rc {

class context;

class call_endpoint {
 public:
  virtual ~call_endpoint() = default;
  /// The name errors show ("direct:orders").
  virtual std::string describe() const = 0;
  /// Runs `ex` through the endpoint's route; returns the route's final exchange.
  virtual task<exchange> invoke(context& ctx, exchange ex) = 0;
};

/// An endpoint ctx.send() / ctx.request() accept: a call_endpoint that says which body it takes.
template <class E>
concept callable_endpoint = std::derived_from<E, call_endpoint> && std::copy_constructible<E> && requires {
  typename E::body_type;
};

/// Headers a call carries into the route: `{{"tenant", "acme"}, {"priority", 2}}`.
using call_headers = std::vector<std::pair<std::string, nlohmann::json>>;

namespace detail {

/// The exchange a call starts with: a fresh id (its own correlation id), the body, the headers.
template <class Body>
exchange call_exchange(Body&& body, call_headers&& headers) {
  exchange ex;
  ex.set_body(std::forward<Body>(body));
  for (auto& [key, value] : headers) ex.set_header(key, std::move(value));
  return ex;
}

/// The reply body of a call, checked against the type the caller asked for (RC5002 otherwise).
template <class Reply>
Reply take_reply(exchange& reply, std::string_view call, const call_endpoint& endpoint) {
  if (!reply.raw_body().template holds<Reply>())
    throw error(errc::validation, std::string(call) + "(): the reply of " + endpoint.describe() +
                                      " is not of the requested type (the route's final body is another type)");
  return std::move(reply.body<Reply>());
}

/// Awaits `t` and keeps its value in `out` (request_sync's reply, owned jointly with the caller).
template <class Reply>
task<void> store_reply(task<Reply> t, std::shared_ptr<std::optional<Reply>> out) {
  out->emplace(co_await t);
}

}  // namespace detail
}  // namespace rc
