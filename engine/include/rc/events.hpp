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
#include <compare>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
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
  X(choice_matched, "route:operation:choice:matched")         \
  X(choice_unmatched, "route:operation:choice:unmatched")     \
  X(store_failed, "route:store:failed")                       \
  X(store_recovered, "route:store:recovered")                 \
  X(batch_started, "route:batch:started")                     \
  X(batch_flushed, "route:batch:flushed")                     \
  X(batch_stopped, "route:batch:stopped")                     \
  X(sample_passed, "route:operation:sample:passed")           \
  X(sample_dropped, "route:operation:sample:dropped")         \
  X(dedupe_passed, "route:operation:dedupe:pass")             \
  X(dedupe_duplicate, "route:operation:dedupe:duplicate")     \
  X(debounce_held, "route:operation:debounce:held")           \
  X(debounce_dropped, "route:operation:debounce:dropped")     \
  X(debounce_released, "route:operation:debounce:released")

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

namespace detail {
// One address per type: what event::get<T>() compares, without RTTI.
template <class T>
inline constexpr char event_type_tag = 0;
}  // namespace detail

/// A typed payload: a value the emitter builds on its stack (no allocation), which renders
/// itself as the JSON details only when a subscriber reads them.
template <class T>
concept typed_event_details =
    !std::is_convertible_v<T, const nlohmann::json&> && requires(const T& t, nlohmann::json& j) {
  t.write_json(j);
};

/// An event's details: a typed value (see event::get) or a JSON object, rendered as JSON on the
/// first read and kept. Reads like the JSON object it stands for (e.details["routeId"],
/// e.details.value(...), const nlohmann::json& d = e.details, or e.details()). A copy holds the
/// rendered JSON only.
class event_details {
 public:
  event_details() = default;
  event_details(const event_details& o) : json_(o.json()) {}
  event_details& operator=(const event_details& o) {
    if (this != &o) {
      json_ = o.json();
      typed_ = nullptr;
      tag_ = nullptr;
      write_ = nullptr;
    }
    return *this;
  }

  /// Replaces the details (a test building an event by hand).
  event_details& operator=(nlohmann::json j) {
    json_ = j.is_object() ? std::move(j) : nlohmann::json::object();
    typed_ = nullptr;
    tag_ = nullptr;
    write_ = nullptr;
    return *this;
  }

  /// The details as a JSON object, rendered now if they were not yet.
  const nlohmann::json& json() const {
    if (!json_) render();
    return *json_;
  }
  const nlohmann::json& operator()() const { return json(); }
  operator const nlohmann::json&() const { return json(); }  // NOLINT: reads as the JSON it is

  // The JSON reads subscribers use, on the rendered object.
  template <class K>
  const nlohmann::json& operator[](K&& k) const {
    return json()[std::forward<K>(k)];
  }
  template <class K>
  const nlohmann::json& at(K&& k) const {
    return json().at(std::forward<K>(k));
  }
  template <class K>
  bool contains(K&& k) const {
    return json().contains(std::forward<K>(k));
  }
  template <class K>
  nlohmann::json::const_iterator find(K&& k) const {
    return json().find(std::forward<K>(k));
  }
  template <class... A>
  auto value(A&&... a) const {
    return json().value(std::forward<A>(a)...);
  }
  template <class T>
  T get() const {
    return json().template get<T>();
  }
  nlohmann::json::const_iterator begin() const { return json().begin(); }
  nlohmann::json::const_iterator end() const { return json().end(); }
  auto items() const { return json().items(); }
  std::size_t size() const { return json().size(); }
  bool empty() const { return json().empty(); }
  bool is_object() const { return json().is_object(); }
  std::string dump(int indent = -1) const { return json().dump(indent); }
  friend bool operator==(const event_details& a, const nlohmann::json& b) { return a.json() == b; }

 private:
  friend class event_bus;
  friend struct event;
  void render() const;

  const void* typed_ = nullptr;  // the emitter's value, during delivery only
  const void* tag_ = nullptr;    // &detail::event_type_tag<T>
  void (*write_)(const void*, nlohmann::json&) = nullptr;
  // Empty until rendered: an event nobody reads the details of never constructs nor destroys a
  // JSON value.
  mutable std::optional<nlohmann::json> json_;
};

/// An event's engine time, read from the clock when first asked: a subscriber that never reads it
/// costs no clock read. Reads as the time_point it stands for (e.at, e.at.time_since_epoch(),
/// to_ms(e.at), time_point t = e.at). A copy holds the time read.
class event_time {
 public:
  event_time() = default;
  event_time(time_point t) noexcept : t_(t), read_(true) {}  // NOLINT: a time_point is an event time
  event_time(const event_time& o) : t_(o.get()), read_(true) {}
  event_time& operator=(const event_time& o) {
    if (this != &o) *this = o.get();
    return *this;
  }
  event_time& operator=(time_point t) noexcept {
    t_ = t;
    read_ = true;
    now_ = nullptr;
    return *this;
  }

  time_point get() const {
    if (!read_) read();
    return t_;
  }
  operator time_point() const { return get(); }  // NOLINT: reads as the time_point it is
  duration time_since_epoch() const { return get().time_since_epoch(); }
  friend bool operator==(const event_time& a, const event_time& b) { return a.get() == b.get(); }
  friend auto operator<=>(const event_time& a, const event_time& b) { return a.get() <=> b.get(); }
  friend duration operator-(const event_time& a, const event_time& b) { return a.get() - b.get(); }

 private:
  friend class event_bus;
  void read() const;

  const std::function<time_point()>* now_ = nullptr;  // the bus's clock, during delivery only
  mutable time_point t_{};
  mutable bool read_ = false;
};

/// An event's ISO-8601 timestamp, rendered from `at` on the first read. Reads as a std::string.
class event_timestamp {
 public:
  event_timestamp() = default;
  event_timestamp(const event_timestamp& o) : text_(o.str()), built_(true) {}
  event_timestamp& operator=(const event_timestamp& o) {
    if (this != &o) {
      text_ = o.str();
      built_ = true;
      render_ = nullptr;
    }
    return *this;
  }
  event_timestamp& operator=(std::string text) {
    text_ = std::move(text);
    built_ = true;
    render_ = nullptr;
    return *this;
  }

  const std::string& str() const {
    if (!built_) render();
    return text_;
  }
  const std::string& operator()() const { return str(); }
  operator const std::string&() const { return str(); }  // NOLINT: reads as the string it is
  bool empty() const { return str().empty(); }
  std::size_t size() const { return str().size(); }
  const char* c_str() const { return str().c_str(); }
  friend bool operator==(const event_timestamp& a, std::string_view b) { return a.str() == b; }

 private:
  friend class event_bus;
  void render() const;

  const event_time* at_ = nullptr;  // the event's, during delivery only
  const std::function<std::string(time_point)>* render_ = nullptr;
  mutable std::string text_;
  mutable bool built_ = false;
};

/// What a handler receives. `details`, `ts` and `at` are rendered (the clock read) when first
/// read, so a subscriber that reads none of them (a counter) costs no JSON, no formatting and no
/// clock read. In real time `at` is thus the time of the first read during delivery, not of the
/// emit (the same instant in virtual time, which a handler does not move). The typed value is readable
/// during delivery only: a copy of the event (kept for later) holds the rendered JSON instead.
/// An event is read on the thread that delivers it.
struct event {
  std::string_view name;
  event_id id{};
  event_time at;                // engine time (virtual under a manual clock), read when first asked
  event_timestamp ts;           // ISO-8601 of `at` (wall clock in real time, 1970 + virtual time otherwise)
  std::string_view context_id;  // the context's id (a copy of the event owns its own)
  event_details details;        // always an object

  event() = default;
  event(const event& o)
      : name(o.name), id(o.id), at(o.at), ts(o.ts), context_id(), details(o.details), own_context_id_(o.context_id) {
    context_id = own_context_id_;
  }
  event& operator=(const event& o) {
    if (this != &o) {
      name = o.name;
      id = o.id;
      at = o.at;
      ts = o.ts;
      details = o.details;
      own_context_id_ = std::string(o.context_id);
      context_id = own_context_id_;
    }
    return *this;
  }

  /// The emitter's typed details when they are a T (rc/event_details.hpp: gate_event,
  /// exchange_event, step_event), else null. Null on a copy.
  template <class T>
  const T* get() const noexcept {
    return details.tag_ == &detail::event_type_tag<T> ? static_cast<const T*>(details.typed_) : nullptr;
  }

  /// {ts, contextId, details, _event}
  nlohmann::json to_json() const;

 private:
  std::string own_context_id_;
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
  /// Emits when someone listens: `make_details()` is called only then. It returns the details as
  /// a JSON object, or as a typed value (typed_event_details: built on the stack, rendered as
  /// JSON only if a subscriber reads e.details).
  template <class MakeDetails>
  void emit(event_id id, MakeDetails&& make_details) {
    if (!listening(id)) return;
    using R = std::decay_t<std::invoke_result_t<MakeDetails&>>;
    if constexpr (typed_event_details<R>) {
      const R value = make_details();
      dispatch_typed(id, &value, &detail::event_type_tag<R>,
                     [](const void* v, nlohmann::json& j) { static_cast<const R*>(v)->write_json(j); });
    } else {
      dispatch(id, make_details());
    }
  }
  void dispatch(event_id id, nlohmann::json details);
  /// `value` (whose type `tag` names) stays alive for the call; `write` renders it.
  void dispatch_typed(event_id id, const void* value, const void* tag, void (*write)(const void*, nlohmann::json&));

  const std::string& context_id() const noexcept { return context_id_; }

 private:
  std::uint64_t add(std::optional<event_id> id, event_handler h);
  void refresh_flags_locked();
  void report_handler_failure(event_id id, std::exception_ptr e);

  std::string context_id_;
  std::function<time_point()> now_;
  std::function<std::string(time_point)> render_ts_;
  template <class Fill>
  void deliver(event_id id, Fill&& fill);

  std::shared_ptr<subscription::state> state_;
  bool light_readers_ = false;  // asymmetric_barrier(): a process-wide constant, asked once
  std::array<std::atomic<bool>, event_count> any_{};
  friend class subscription;
};

}  // namespace rc
