// The JSON rendering of the typed event details (rc/event_details.hpp), read only when a
// subscriber asks for e.details.
#include "rc/event_details.hpp"

#include "rc/exchange.hpp"
#include "rc/route.hpp"
#include "rc/step.hpp"

namespace rc {

const std::string& exchange_ref::route_id() const noexcept { return route->id(); }
std::string exchange_ref::exchange_id() const { return ex->id(); }
std::string exchange_ref::correlation_id() const { return ex->correlation_id(); }

void exchange_ref::write_identity(nlohmann::json& j) const {
  j["routeId"] = route_id();
  j["exchangeId"] = exchange_id();
  j["correlationId"] = correlation_id();
}

void exchange_event::write_json(nlohmann::json& j) const {
  write_identity(j);
  if (completed) {
    j["duration"] = to_ms(took);
    j["exchange"] = ex->to_json();
  }
}

std::string_view step_event::operation() const noexcept { return step->label(); }
std::string_view step_event::adapter() const noexcept { return step->adapter(); }

void step_event::write_json(nlohmann::json& j) const {
  write_identity(j);
  j["operation"] = operation();
  if (!adapter().empty()) j["adapter"] = adapter();
  if (completed) j["duration"] = to_ms(took);
}

const std::string& gate_event::gate_id() const noexcept { return gate->gate_id(); }
rc::scope gate_event::scope() const noexcept { return gate->scope(); }

}  // namespace rc
