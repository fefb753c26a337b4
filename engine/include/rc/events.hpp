// The event bus: a fixed table of event names, exact-name subscriptions plus the catch-all "*".
//
// The table holds the engine's events. A component registers its own (register_event: the HTTP
// source's "plugin:http:request:completed") and gets an id in a small extension range; from then
// on the name is addressable like any other (on(name), find_event, event_name). The engine thus
// knows no component's events.
//
// Names are resolved to ids once. Each id has an "anyone listening" flag, so `emit` with no
// subscriber costs one relaxed load and never builds a payload. Handlers run synchronously on the
// emitting thread, exact-name handlers first, then catch-all, from a snapshot (subscribing during
// dispatch affects later emits only). A handler that throws is reported once as `context:error`
// (the other handlers still get the event) and never reaches the pipeline. Patterns other than "*" are refused
// (RC2001): identity lives in the payload; use for_route() to filter by route.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rc/time.hpp"

namespace rc {

#define RC_EVENT_TABLE(X)                                     \
  X(context_starting, "context:starting")                     \
  X(context_started, "context:started")                       \
  X(context_stopping, "context:stopping")                     \
  X(context_stopped, "context:stopped")                       \
  X(context_error, "context:error")                           \
  X(route_registered, "route:registered")                     \
  X(route_starting, "route:starting")                         \
  X(route_started, "route:started")                           \
  X(route_stopping, "route:stopping")                         \
  X(route_stopped, "route:stopped")                           \
  X(route_error, "route:error")                               \
  X(route_source_failed, "route:source:failed")               \
  X(exchange_started, "route:exchange:started")               \
  X(exchange_completed, "route:exchange:completed")           \
  X(exchange_failed, "route:exchange:failed")                 \
  X(exchange_dropped, "route:exchange:dropped")               \
  X(step_started, "route:step:started")                       \
  X(step_completed, "route:step:completed")                   \
  X(step_failed, "route:step:failed")                         \
  X(step_error, "route:step:error")                           \
  X(throttle_passed, "route:throttle:passed")                 \
  X(throttle_delayed, "route:throttle:delayed")               \
  X(throttle_rejected, "route:throttle:rejected")             \
  X(throttle_overflow, "route:throttle:overflow")             \
  X(retry_started, "route:retry:started")                     \
  X(retry_attempt, "route:retry:attempt")                     \
  X(retry_stopped, "route:retry:stopped")                     \
  X(delay_started, "route:delay:started")                     \
  X(delay_stopped, "route:delay:stopped")                     \
  X(timeout_started, "route:timeout:started")                 \
  X(timeout_stopped, "route:timeout:stopped")                 \
  X(timeout_expired, "route:timeout:expired")                 \
  X(error_handler_invoked, "route:error-handler:invoked")     \
  X(error_handler_recovered, "route:error-handler:recovered") \
  X(error_handler_failed, "route:error-handler:failed")       \
  X(error_caught, "route:error:caught")                       \
  X(breaker_opened, "route:circuitBreaker:opened")            \
  X(breaker_half_open, "route:circuitBreaker:halfOpen")       \
  X(breaker_closed, "route:circuitBreaker:closed")            \
  X(breaker_rejected, "route:circuitBreaker:rejected")        \
  X(concurrency_queued, "route:concurrency:queued")           \
  X(concurrency_acquired, "route:concurrency:acquired")       \
  X(concurrency_released, "route:concurrency:released")       \
  X(concurrency_rejected, "route:concurrency:rejected")       \
  X(cache_hit, "route:cache:hit")                             \
  X(cache_miss, "route:cache:miss")                           \
  X(cache_stored, "route:cache:stored")                       \
  X(cache_failed, "route:cache:failed")                       \
  X(exchange_restored, "route:exchange:restored")             \
  X(slow_down_passed, "route:slowDown:passed")                \
  X(slow_down_delayed, "route:slowDown:delayed")              \
  X(slow_down_rejected, "route:slowDown:rejected")            \
  X(rate_limit_passed, "route:rateLimit:passed")              \
  X(rate_limit_rejected, "route:rateLimit:rejected")          \
  X(parse_failed, "route:parse:failed")                       \
  X(store_failed, "route:store:failed")                       \
  X(store_recovered, "route:store:recovered")

enum class event_id : std::uint16_t {
#define RC_EVENT_ENUM(id, name) id,
  RC_EVENT_TABLE(RC_EVENT_ENUM)
#undef RC_EVENT_ENUM
      count_
};

/// Events in the engine's table.
inline constexpr std::size_t builtin_event_count = static_cast<std::size_t>(event_id::count_);
/// Room for events components register (register_event).
inline constexpr std::size_t max_component_events = 16;
/// Ids a bus knows: the table, then the registered ones.
inline constexpr std::size_t event_count = builtin_event_count + max_component_events;

/// "route:throttle:passed" for event_id::throttle_passed; a registered event's name.
std::string_view event_name(event_id id) noexcept;
/// The id of a name in the table or registered, or nothing.
std::optional<event_id> find_event(std::string_view name) noexcept;
/// Registers an event a component emits and returns its id; the same id for the same name, from
/// any thread. A name of the table returns the table's id. RC2001 past max_component_events, or
/// for "*" or an empty name. A component registers its events at static initialisation (an
/// inline variable of its header), so users can subscribe by name before it emits.
event_id register_event(std::string_view name);

struct event {
  std::string_view name;
  event_id id;
  time_point at;   // engine time (virtual under a manual clock)
  std::string ts;  // ISO-8601 of `at` (wall clock in real time, 1970 + virtual time otherwise)
  std::string context_id;
  nlohmann::json details;  // always an object
  /// {ts, contextId, details, _event}
  nlohmann::json to_json() const;
};

using event_handler = std::function<void(const event&)>;

class event_bus;

/// Unsubscribes when destroyed (or on unsubscribe()). Movable, not copyable.
class subscription {
 public:
  subscription() = default;
  subscription(subscription&& o) noexcept;
  subscription& operator=(subscription&& o) noexcept;
  subscription(const subscription&) = delete;
  subscription& operator=(const subscription&) = delete;
  ~subscription() { unsubscribe(); }
  void unsubscribe();
  /// Keeps the handler subscribed for the bus's whole life.
  void release() noexcept { bus_.reset(); }
  bool active() const noexcept { return !bus_.expired(); }

 private:
  friend class event_bus;
  struct state;
  subscription(std::weak_ptr<state> bus, std::uint64_t token) : bus_(std::move(bus)), token_(token) {}
  std::weak_ptr<state> bus_;
  std::uint64_t token_ = 0;
};

class event_bus {
 public:
  /// `clock_now` gives engine time; `wall_ts` renders a timestamp for it.
  event_bus(std::string context_id, std::function<time_point()> clock_now,
            std::function<std::string(time_point)> render_ts);
  ~event_bus();

  /// Exact name from the table, or "*" for every event. Other names: rc::error RC2001.
  subscription on(std::string_view name, event_handler h);
  subscription once(std::string_view name, event_handler h);
  /// Every event whose details.routeId equals `route_id`.
  subscription for_route(std::string route_id, event_handler h);

  bool listening(event_id id) const noexcept {
    return any_[static_cast<std::size_t>(id)].load(std::memory_order_relaxed);
  }

  /// Emits when someone listens: `make_details()` is called only then.
  template <class MakeDetails>
  void emit(event_id id, MakeDetails&& make_details) {
    if (!listening(id)) return;
    dispatch(id, make_details());
  }
  void dispatch(event_id id, nlohmann::json details);

  const std::string& context_id() const noexcept { return context_id_; }

 private:
  std::uint64_t add(std::optional<event_id> id, event_handler h);
  void refresh_flags_locked();
  void report_handler_failure(event_id id, std::exception_ptr e);

  std::string context_id_;
  std::function<time_point()> now_;
  std::function<std::string(time_point)> render_ts_;
  std::shared_ptr<subscription::state> state_;
  std::array<std::atomic<bool>, event_count> any_{};
  friend class subscription;
};

}  // namespace rc
