#include "rc/log.hpp"

namespace rc {

void log_destination::send_now(exchange& ex, route_runtime& rt) {
  const nlohmann::json body = ex.raw_body().to_json();
  const std::string text =
      body.is_null() && ex.raw_body().has_value() ? "<" + std::string(ex.raw_body().type().name()) + ">" : body.dump();
  fmt::print(out_, "{}[{}] {} {}\n", prefix_.empty() ? "" : prefix_ + " ", rt.id(), ex.id(), text);
}

}  // namespace rc
