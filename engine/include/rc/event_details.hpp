// Typed details of the engine's frequent events: the exchange and step lifecycle and the rate
// gates' passed / delayed / rejected. The emitter fills one of these on its stack (a few pointers
// and numbers, no allocation); a subscriber reads it with e.get<T>() while the event is
// delivered, and the JSON details (e.details) are rendered from it only when someone reads them,
// with exactly the fields docs/events.md lists. The pointers are valid during delivery only: a
// copy of the event carries the rendered JSON instead.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "rc/time.hpp"

namespace rc {

class exchange;
class route_runtime;
class step;
class wrapper;
enum class scope : std::uint8_t;

/// What every typed event names: the route and the exchange.
struct exchange_ref {
  const route_runtime* route = nullptr;
  const exchange* ex = nullptr;

  const std::string& route_id() const noexcept;
  std::string exchange_id() const;
  std::string correlation_id() const;
  /// routeId, exchangeId, correlationId.
  void write_identity(nlohmann::json& j) const;
};

/// route:exchange:started, route:exchange:completed (+ duration, exchange).
struct exchange_event : exchange_ref {
  bool completed = false;
  duration took{};  // completed: since the exchange started (0 when nobody listened then)

  void write_json(nlohmann::json& j) const;
};

/// route:step:started, route:step:completed (+ duration).
struct step_event : exchange_ref {
  const rc::step* step = nullptr;
  bool completed = false;
  duration took{};  // completed: the step's run

  std::string_view operation() const noexcept;
  std::string_view adapter() const noexcept;
  void write_json(nlohmann::json& j) const;
};

/// route:throttle:*, route:slowDown:*, route:rateLimit:* passed / delayed / rejected.
struct gate_event : exchange_ref {
  const wrapper* gate = nullptr;
  std::string_view key;  // the exchange's key; empty when the gate is not keyed
  bool keyed = false;
  bool overflow = false;   // counted in the gate's overflow (its table was full)
  bool waited = false;     // passed: after a wait
  duration elapsed{};      // passed: how long it waited
  time_point passed_at{};  // passed: the gate's clock when it let the exchange on (after a wait,
                           // the time the limiter judged; at once, the time of the decision)
  duration wait{};         // delayed: the wait ahead (throttle); rejected: retry after
  std::uint64_t hits = 0;  // slow_down / rate_limit: the exchange's hit in its window; 0 for throttle

  /// "throttle#1": the gate among the route's wrappers.
  const std::string& gate_id() const noexcept;
  rc::scope scope() const noexcept;
  /// The JSON the gate documents: identity, gateId, stepLabel, scope, label, key, overflow and
  /// the gate's own fields.
  void write_json(nlohmann::json& j) const { write(impl, *this, j); }

  // Set by the gate: renders its own fields (it knows its decision and options).
  const void* impl = nullptr;
  void (*write)(const void* impl, const gate_event&, nlohmann::json&) = nullptr;
};

}  // namespace rc
