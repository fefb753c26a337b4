// rc::recovery: what an error handler (or a circuit breaker's fallback) decides to do with a
// failed exchange, and rc::forward_target, the engine-level view of a route that can take it
// (a dead-letter route).
//
// A recovery is one of:
// - a body: `return std::string("fallback");` converts implicitly (or `recovery::body(x)`); it
//   becomes the exchange's body. It must be of the body type the wrapped step produces (route
//   scope: the route's final body type), as a transform's result would be: another type is
//   RC5003 when the exchange gets there.
// - `recovery::drop(reason)`: the exchange is dropped (default reason "error-handler-drop").
// - `recovery::rethrow()`: the failure goes on to the outer wrappers.
// - `recovery::forward(target)`: the exchange goes to `target` (e.g. `rc::direct<T>("dead")`)
//   with the error in headers; the target route's final body becomes the body. A target that
//   drops the exchange fails it with RC5031.
//
// The engine knows nothing of components: a forward target is anything implementing
// forward_target (rc::direct<T> does).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "rc/exchange.hpp"
#include "rc/task.hpp"

namespace rc {

/// A route an error handler can forward a failed exchange to.
class forward_target {
 public:
  virtual ~forward_target() = default;
  /// The name events show ("direct:dead-letters").
  virtual std::string describe() const = 0;
  /// Runs a copy of `ex` (with the error headers already set on `ex`) through the target and
  /// returns the target's final exchange. Throws the target's failure, or RC5031 when it drops.
  virtual task<exchange> forward(exchange& ex, route_runtime& rt) = 0;
};

/// Headers a forwarded exchange carries.
inline constexpr std::string_view error_code_header = "routecraft.error.code";
inline constexpr std::string_view error_message_header = "routecraft.error.message";
inline constexpr std::string_view error_operation_header = "routecraft.error.operation";
inline constexpr std::string_view error_route_header = "routecraft.error.route";

/// The body type the wrapped step produces, written by the builder once it knows it (the step
/// after a step-scope wrapper, the route's final body type in route scope). A wrapper that puts
/// a recovery body in place checks it against this, so a body of the wrong type is RC5003 rather
/// than a body the next step misreads. Null or unset: unchecked.
using body_type_slot = std::shared_ptr<const std::type_info*>;

namespace detail {
/// Throws RC5003 naming `op` when `slot` knows a type and `value` holds another one.
void check_recovery_body(const body_type_slot& slot, const any_body& value, std::string_view op);
}  // namespace detail

class recovery {
 public:
  enum class kind : std::uint8_t { body, drop, rethrow, forward };

  /// A recovery body. String literals become std::string.
  template <class T, class D = std::decay_t<T>,
            class = std::enable_if_t<!std::is_same_v<D, recovery> && !std::is_same_v<D, any_body> &&
                                     !std::is_same_v<D, kind>>>
  recovery(T&& value) {  // NOLINT(google-explicit-constructor): a body converts implicitly
    if constexpr (std::is_same_v<D, const char*> || std::is_same_v<D, char*>)
      body_.emplace<std::string>(value);
    else
      body_.emplace<D>(std::forward<T>(value));
  }
  /// A type-erased body (e.g. a copy of a cached value).
  explicit recovery(any_body value) : body_(std::move(value)) {}

  template <class T>
  static recovery body(T&& value) {
    return recovery(std::forward<T>(value));
  }
  static recovery drop(std::string reason = "error-handler-drop") {
    recovery r(kind::drop);
    r.reason_ = std::move(reason);
    return r;
  }
  static recovery rethrow() { return recovery(kind::rethrow); }
  /// Forwards to a target: any forward_target, copied (rc::direct<T>("dead-letters")), or shared.
  template <class Target>
  requires std::is_base_of_v<forward_target, std::decay_t<Target>>
  static recovery forward(Target&& target) {
    recovery r(kind::forward);
    r.target_ = std::make_shared<std::decay_t<Target>>(std::forward<Target>(target));
    return r;
  }
  static recovery forward(std::shared_ptr<forward_target> target) {
    recovery r(kind::forward);
    r.target_ = std::move(target);
    return r;
  }

  kind what() const noexcept { return kind_; }
  any_body& value() noexcept { return body_; }
  const std::string& reason() const noexcept { return reason_; }
  const std::shared_ptr<forward_target>& target() const noexcept { return target_; }

 private:
  explicit recovery(kind k) : kind_(k) {}
  kind kind_ = kind::body;
  any_body body_;
  std::string reason_;
  std::shared_ptr<forward_target> target_;
};

}  // namespace rc
