// .log() / .debug(): a tap that writes one line per exchange through the log sink
// (rc/logging.hpp). The body and headers are unchanged and the route goes on at once.
//
// The line is "[<route id>] <exchange id> <text>". The text is the formatter's string,
// `f(const Body&, const rc::exchange&)` or `f(const Body&)`; without one, the body as JSON for
// .log() and the body then the headers for .debug(). Nothing is formatted when the logger leaves
// the level out. A formatter that throws is reported as route:step:error (with RC5001) and the
// exchange goes on, as with any tap.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "rc/error.hpp"
#include "rc/events.hpp"
#include "rc/logging.hpp"
#include "rc/route.hpp"
#include "rc/step.hpp"

namespace rc {

/// No formatter: the default text.
struct default_log_text {};

template <class Body, class F>
class log_step final : public step {
 public:
  log_step(std::string_view label, log_level level, F f) : label_(label), level_(level), f_(std::move(f)) {}
  std::string_view operation() const override { return "tap"; }
  std::string_view label() const override { return label_; }
  std::string_view adapter() const override { return "log"; }
  bool synchronous() const noexcept override { return true; }

  outcome run_now(exchange& ex, route_runtime& rt) override {
    if (!log_enabled(level_)) return outcome::proceed();
    std::string text;
    try {
      text = format(ex);
    } catch (...) {
      const error err = to_error(std::current_exception());
      rt.events().emit(event_id::step_error, [&] {
        return nlohmann::json{
            {"routeId", rt.id()}, {"error", error_json(err)}, {"operation", label_}, {"exchange", ex.to_json()}};
      });
      return outcome::proceed();
    }
    write_log(level_, log_line(rt, ex, text));
    return outcome::proceed();
  }

 private:
  std::string format(const exchange& ex) {
    if constexpr (std::is_same_v<F, default_log_text>) {
      std::string text = body_log_text(ex);
      if (label_ == "debug") text += " headers=" + ex.headers().to_json().dump();
      return text;
    } else if constexpr (std::is_invocable_v<F&, const Body&, const exchange&>) {
      return std::string(f_(ex.body<Body>(), ex));
    } else {
      return std::string(f_(ex.body<Body>()));
    }
  }

  std::string_view label_;  // "log" or "debug": a literal
  log_level level_;
  F f_;
};

}  // namespace rc
