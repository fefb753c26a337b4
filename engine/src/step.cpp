#include "rc/step.hpp"

#include "rc/route.hpp"

namespace rc {

task<outcome> run_guarded(step& s, exchange& ex, route_runtime& rt) {
  try {
    co_return co_await s.run(ex, rt);
  } catch (...) {
    co_return outcome::failed(std::current_exception());
  }
}

task<outcome> wrapper::run_inner(exchange& ex, route_runtime& rt) {
  if (!inner_) co_return outcome::proceed();
  if (inner_->synchronous()) co_return run_now_guarded(*inner_, ex, rt);
  // run_guarded inlined: one coroutine frame less per waiting exchange.
  outcome o;
  try {
    o = co_await inner_->run(ex, rt);
  } catch (...) {
    o = outcome::failed(std::current_exception());
  }
  co_return o;
}

nlohmann::json wrapper::identity(const exchange& ex, const route_runtime& rt, std::string_view label) const {
  nlohmann::json j = {{"routeId", rt.id()},
                      {"exchangeId", ex.id()},
                      {"correlationId", ex.correlation_id()},
                      {"stepLabel", scope_ == rc::scope::route ? std::string("route") : std::string(this->label())},
                      {"scope", to_string(scope_)}};
  if (!gate_id_.empty()) j["gateId"] = gate_id_;
  if (!label.empty()) j["label"] = label;
  return j;
}

}  // namespace rc
