// The two interfaces components implement: a typed source (where exchanges come from) and a
// destination (where `.to()` and `.tap()` send them).
#pragma once

#include <string_view>

#include "rc/route.hpp"

namespace rc {

/// A source of bodies of type T. The builder reads `body_type` to type the rest of the route.
template <class T>
class source : public source_base {
 public:
  using body_type = T;
};

/// A destination. Synchronous ones implement send_now (no coroutine frame); asynchronous ones
/// override synchronous() and send().
class destination_base {
 public:
  virtual ~destination_base() = default;
  virtual std::string_view adapter() const = 0;
  virtual bool synchronous() const noexcept { return true; }
  virtual void send_now(exchange& /*ex*/, route_runtime& /*rt*/) {}
  virtual task<void> send(exchange& ex, route_runtime& rt) {
    send_now(ex, rt);
    co_return;
  }
};

}  // namespace rc
