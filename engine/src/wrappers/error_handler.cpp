#include "rc/wrappers/error_handler.hpp"

#include <cxxabi.h>

#include <cstdlib>

#include "rc/route.hpp"

namespace rc {

void error_options::validate() const {
  if (!handler && !async_handler) invalid_option("error", "handler", "a callable", "an empty function");
}

namespace detail {
namespace {

std::string type_name(const std::type_info& t) {
  int status = 0;
  char* readable = abi::__cxa_demangle(t.name(), nullptr, nullptr, &status);
  std::string out = status == 0 && readable ? readable : t.name();
  std::free(readable);
  return out;
}

}  // namespace

void check_recovery_body(const body_type_slot& slot, const any_body& value, std::string_view op) {
  if (!slot || !*slot || value.type() == **slot) return;
  throw error(errc::misconfigured, fmt::format("{}: the recovery body is a {}, but the step it replaces produces a {}",
                                               op, type_name(value.type()), type_name(**slot)));
}

task<any_body> forward_failed(forward_target& target, exchange& ex, route_runtime& rt, const error& err) {
  // The error travels in headers on the forwarded copy only: the caller's exchange, if recovered
  // with the reply, does not keep them.
  const std::string operation(ex.operation());
  ex.set_header(error_code_header, err.code_string());
  ex.set_header(error_message_header, err.message());
  ex.set_header(error_operation_header, operation);
  ex.set_header(error_route_header, rt.id());
  exchange reply;
  std::exception_ptr failure;
  try {
    reply = co_await target.forward(ex, rt);
  } catch (...) {
    failure = std::current_exception();
  }
  for (auto key : {error_code_header, error_message_header, error_operation_header, error_route_header})
    ex.headers().erase(key);
  if (failure) std::rethrow_exception(failure);
  co_return std::move(reply.raw_body());
}

}  // namespace detail

namespace {

class error_step final : public wrapper {
 public:
  std::string_view wrapper_kind() const noexcept override { return "error"; }

  error_step(error_options o, std::unique_ptr<step> inner, rc::scope s, body_type_slot body_type)
      : wrapper(std::move(inner), s), options_(std::move(o)), body_type_(std::move(body_type)) {}

  // Always asynchronous: a forward recovery waits for another route.
  task<outcome> run(exchange& ex, route_runtime& rt) override {
    outcome o;
    if (inner_is_sync())
      o = run_inner_now(ex, rt);
    else
      o = co_await run_inner(ex, rt);
    if (!o.is_fail()) co_return o;
    co_return co_await handle(std::move(o), ex, rt);
  }

 private:
  // The failure path, in its own frame: the success path keeps a small one.
  task<outcome> handle(outcome failed, exchange& ex, route_runtime& rt) {
    failed.error = normalise(failed.error);
    const error original = to_error(failed.error);
    const std::string failed_operation(ex.operation());
    auto& bus = rt.events();
    bus.emit(event_id::error_handler_invoked, [&] {
      auto j = identity(ex, rt);
      j["originalError"] = error_json(original);
      j["failedOperation"] = failed_operation;
      return j;
    });

    std::exception_ptr handler_error;
    recovery r = recovery::rethrow();
    try {
      if (options_.async_handler)
        r = co_await options_.async_handler(original, ex);
      else
        r = options_.handler(original, ex);
    } catch (...) {
      handler_error = std::current_exception();
    }
    std::string forwarded_to;
    if (!handler_error && r.what() == recovery::kind::forward) {
      if (!r.target()) {
        handler_error = std::make_exception_ptr(error(errc::misconfigured, "error(): forward() needs a target"));
      } else {
        forwarded_to = r.target()->describe();
        try {
          any_body reply = co_await detail::forward_failed(*r.target(), ex, rt, original);
          r = recovery(std::move(reply));
        } catch (...) {
          handler_error = std::current_exception();
        }
      }
    }

    if (!handler_error && r.what() == recovery::kind::body) {
      try {
        detail::check_recovery_body(body_type_, r.value(), "error()");
      } catch (...) {
        handler_error = std::current_exception();
      }
    }

    if (handler_error || r.what() == recovery::kind::rethrow) {
      outcome out = handler_error ? outcome::failed(normalise(handler_error)) : std::move(failed);
      bus.emit(event_id::error_handler_failed, [&] {
        auto j = identity(ex, rt);
        j["originalError"] = error_json(original);
        j["failedOperation"] = failed_operation;
        j["error"] = error_json(to_error(out.error));
        j["rethrown"] = !handler_error;
        if (!forwarded_to.empty()) j["forwardedTo"] = forwarded_to;
        return j;
      });
      // Route scope: the failure was reported (route:step:error) by the run below, and the
      // handler's own failure is reported by route:error-handler:failed; route:error and the
      // terminal event follow. Step scope: the executor reports what goes on to the outer steps.
      out.reported = scope_ == rc::scope::route || (!handler_error && out.reported);
      co_return out;
    }

    const bool dropped = r.what() == recovery::kind::drop;
    if (!dropped) ex.raw_body() = std::move(r.value());
    if (scope_ == rc::scope::route)
      bus.emit(event_id::error_caught, [&] {
        return nlohmann::json{{"routeId", rt.id()},
                              {"exchangeId", ex.id()},
                              {"correlationId", ex.correlation_id()},
                              {"error", error_json(original)},
                              {"failedOperation", failed_operation},
                              {"exchange", ex.to_json()}};
      });
    bus.emit(event_id::error_handler_recovered, [&] {
      auto j = identity(ex, rt);
      j["recoveryStrategy"] = scope_ == rc::scope::route ? "route-error-handler" : "step-error-handler";
      j["originalError"] = error_json(original);
      j["failedOperation"] = failed_operation;
      j["action"] = dropped ? "drop" : forwarded_to.empty() ? "body" : "forward";
      if (dropped) j["reason"] = r.reason();
      if (!forwarded_to.empty()) j["forwardedTo"] = forwarded_to;
      return j;
    });
    if (dropped) co_return outcome::dropped(r.reason());
    co_return outcome::proceed();
  }

  error_options options_;
  body_type_slot body_type_;
};

}  // namespace

std::unique_ptr<step> make_error_handler(error_options options, std::unique_ptr<step> inner, scope s,
                                         body_type_slot body_type) {
  options.validate();
  return std::make_unique<error_step>(std::move(options), std::move(inner), s, std::move(body_type));
}

}  // namespace rc
