// on_event(filter): a source fed by the context's own event bus, e.g. a route that alerts on
// "route:throttle:rejected". (The catalog calls it `event(filter)`; in C++ `rc::event` is already
// the event type every handler takes, and a function of that name would hide it.)
//
// Filter: event names, exact or with `*` wildcards ("route:throttle:*"), resolved against the
// event table (and the components' registered events) when the route starts, and/or a predicate.
// No names means every event, which makes every emitter build its payload: name what you need.
// Body: the event (name, details, engine time, ISO timestamp). Headers: routecraft.event.name,
// routecraft.event.depth.
//
// Never feeding on itself (what is guaranteed):
// - events whose details.routeId is this source's own route are not delivered to it;
// - every exchange an event source emits is registered, while it runs, under its correlation id
//   with a depth (1 for an event that no event route caused). An event whose correlationId is one
//   of those (the exchange's own events, and those of routes it calls through direct(), which keep
//   the correlation id) has depth + 1; past `max_depth` (default 1) it is not delivered to any
//   event source and counts as suppressed. So two event routes cannot ping-pong, and a chain of
//   event routes is at most max_depth long. Work detached from the run (a tap still going after
//   the run ended) is not covered.
//
// Backpressure: the bus calls handlers synchronously on the emitting thread, so the handler only
// filters and queues; the source takes the queue one event at a time, each run awaited. The queue
// is bounded (`queue_capacity`); when full, `overflow` says which event goes (the oldest queued by
// default, or the new one), `dropped()` counts them and "route:event:overflow" {routeId, event,
// dropped, capacity} is emitted (not re-entrantly: an overflow while emitting one only counts).
// Events still queued when the route stops are discarded.
#pragma once

#include <atomic>
#include <concepts>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "rc/endpoint.hpp"
#include "rc/events.hpp"

namespace rc {

/// An event as a body: what the handler saw, owned.
struct event_message {
  std::string name;
  nlohmann::json details;  // always an object
  time_point at{};         // engine time
  std::string ts;          // ISO-8601 wall time
};

enum class event_overflow : std::uint8_t { drop_oldest, drop_newest };

struct event_source_options {
  std::vector<std::string> names;  // exact names or `*` patterns; empty = every event
  /// Further filter, called on the emitting thread (keep it cheap; it must not throw).
  std::function<bool(const event&)> where;
  std::size_t queue_capacity = 1024;
  event_overflow overflow = event_overflow::drop_oldest;
  unsigned max_depth = 1;  // how many event routes may follow one another (see above)
};

inline const event_id event_source_overflow = register_event("route:event:overflow");

class event_source final : public source<event_message> {
 public:
  /// RC5003 for a name or pattern that matches no event, a zero capacity or a zero max_depth.
  explicit event_source(event_source_options o);
  std::string_view adapter() const override { return "event"; }
  bool finite() const noexcept override { return false; }
  /// Subscribes: from here on, matching events queue for run().
  void attach(route_runtime& rt) override;
  task<void> run(source_context& sc) override;

  /// Events dropped because the queue was full. Copies of a source share their counters.
  std::uint64_t dropped() const noexcept;
  /// Events not delivered because an event route caused them beyond max_depth.
  std::uint64_t suppressed() const noexcept;

  struct state;

 private:
  std::shared_ptr<state> st_;
};

inline event_source on_event(event_source_options o) { return event_source(std::move(o)); }
/// One name or pattern. (A template, so that a braced options list picks the overload above.)
template <class Name>
requires std::convertible_to<Name, std::string_view> event_source on_event(Name&& name) {
  event_source_options o;
  o.names.emplace_back(std::string_view(name));
  return event_source(std::move(o));
}
/// Names or patterns, and a predicate.
inline event_source on_event(std::vector<std::string> names, std::function<bool(const event&)> where) {
  event_source_options o;
  o.names = std::move(names);
  o.where = std::move(where);
  return event_source(std::move(o));
}

}  // namespace rc
