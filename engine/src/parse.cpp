#include "rc/parse.hpp"

#include <fmt/format.h>

#include "rc/route.hpp"

namespace rc {

outcome parse_step::run_now(exchange& ex, route_runtime& rt) {
  std::exception_ptr failure;
  try {
    parse(ex);
    return outcome::proceed();
  } catch (const error& e) {
    failure =
        e.code() == errc::source_parse_failed
            ? std::current_exception()
            : std::make_exception_ptr(error(errc::source_parse_failed, fmt::format("{}: {}", where(ex), e.message()),
                                            false, std::current_exception()));
  } catch (...) {
    failure = std::make_exception_ptr(error(errc::source_parse_failed,
                                            fmt::format("{}: {}", where(ex), message_of(std::current_exception())),
                                            false, std::current_exception()));
  }
  rt.events().emit(event_id::parse_failed, [&] {
    return nlohmann::json{{"routeId", rt.id()},
                          {"exchangeId", ex.id()},
                          {"adapter", adapter()},
                          {"mode", to_string(mode_)},
                          {"error", error_json(failure)}};
  });
  if (mode_ == parse_error::drop) return outcome::dropped("parse-failed");
  if (mode_ == parse_error::abort && stop_ != nullptr) stop_->store(true, std::memory_order_release);
  return outcome::failed(std::move(failure));
}

}  // namespace rc
