// rc::context: owns the executor, the clock, the routes and the event bus.
//
// Real time: `start()` starts the sources on the context's own worker threads (1 by default,
// `threads` on request) over Boost.Asio; `drain()` blocks until every finite source has finished
// and no exchange is in flight; `stop()` closes intake (waiting throttle and delay waits end at
// once and their exchanges are admitted and run to completion), drains within
// `shutdown_timeout`, then stops the threads.
//
// Operability: snapshot() reads every route's counters (in flight, each gate's passed, delayed,
// rejected and waits; rc/metrics.hpp) and the readiness: started, every route's source started,
// not stopping. It formats nothing; http_source's /metrics and /ready render it (components).
//
// Calling a route from application code: send() / request() (co_await) and send_sync() /
// request_sync() (blocking) run a body through any rc::call_endpoint (rc/call.hpp; rc::direct<T>).
//
// Virtual time (`rc::context ctx(rc::virtual_time)`): nothing runs on its own. The caller drives
// the manual clock with `advance(d)`, `run_until_idle()` and `drain()`, which run everything due
// in (due time, registration) order on the calling thread. Tests and rc-sim use this mode; runs
// are exact and identical every time.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include "rc/call.hpp"
#include "rc/clock.hpp"
#include "rc/events.hpp"
#include "rc/metrics.hpp"
#include "rc/route.hpp"

namespace boost::asio {
class io_context;
}

namespace rc {

struct virtual_time_t {
  explicit virtual_time_t() = default;
};
inline constexpr virtual_time_t virtual_time{};

struct context_options {
  unsigned threads = 1;
  /// How long stop() lets in-flight exchanges finish before abandoning them.
  duration shutdown_timeout = std::chrono::seconds(30);
  /// Context id in event payloads; random when empty.
  std::string id;
  /// Real time only: the OS timer is set this much before each wait falls due, and the thread it
  /// wakes spins on the clock for the rest, so a throttle's slot or a delay's end is met within a
  /// few µs whenever the OS wakes the thread no later than that (a VM typically wakes it 50-150 µs
  /// after its time). Costs up to timer_lead of a core per timer, and the woken thread runs
  /// nothing else meanwhile. 0 (the default): the OS timer alone. In [0, 10 ms] (RC5003 otherwise).
  duration timer_lead = duration::zero();
  /// Real time only: helper threads, one pinned to each core the process may run on (at most
  /// four), sleep until each timer falls due beside the context's own; the first awake while the
  /// wait is still pending wakes the context's thread, which then runs on that core. On a VM whose
  /// host pauses one core at a time, a throttle's slot or a delay's end is then met about as late
  /// as the earlier of the cores' wake-ups rather than that of the one the thread slept on (README,
  /// Benchmarks: pacing). Costs the helpers (asleep, at the lowest priority) and 25-40 µs of
  /// CPU per timer over all threads, measured. No effect on one core or outside Linux. Off by default.
  bool timer_race = false;
  /// Real time only: read the time from the processor's time-stamp counter, kept on
  /// steady_clock's time line (re-anchored at least every 4 ms, never stepping back; rc/tsc_clock.hpp),
  /// where the kernel keeps time with that counter itself (clocksource "tsc", invariant TSC). A
  /// read costs about 10 ns instead of steady_clock's 25, once an exchange for every throttle or
  /// limiter. false, or on other machines: steady_clock. Waits are on steady_clock either way.
  bool tsc_clock = true;
};

struct stop_result {
  bool forced = false;
  std::vector<std::string> pending;  // routes with work still in flight when forced
};

class context {
 public:
  context();
  explicit context(context_options options);
  explicit context(virtual_time_t, context_options options = {});
  ~context();
  context(const context&) = delete;
  context& operator=(const context&) = delete;

  /// Registers a route (anything with a build() returning route_definition, or a definition).
  route_runtime& add(route_definition def);
  template <class Builder, class = decltype(std::declval<Builder&&>().build())>
  route_runtime& add(Builder&& b) {
    return add(std::forward<Builder>(b).build());
  }

  subscription on(std::string_view name, event_handler h) { return events().on(name, std::move(h)); }
  subscription once(std::string_view name, event_handler h) { return events().once(name, std::move(h)); }
  subscription for_route(std::string route_id, event_handler h) {
    return events().for_route(std::move(route_id), std::move(h));
  }

  void start();
  /// Waits until every finite source has finished and nothing is in flight.
  void drain();
  stop_result stop();

  // Virtual time only.
  bool is_virtual() const noexcept;
  void advance(duration d);
  void advance_to(time_point t);
  /// Runs until nothing is ready and no wait is pending (never returns with an endless source).
  void run_until_idle();
  /// Moves now() forward by `d` without running anything, as when the OS deschedules the process
  /// or a VM stalls: every wait that fell due meanwhile wakes late, at the new now(), on the next
  /// advance() or run_until_idle(). For testing how the engine copes with late timers.
  void stall(duration d);
  /// Makes the wall clock (UTC) read `w` now; virtual time then runs on from that instant. Calendar
  /// schedules (cron, a timer's exact_time), event timestamps and wall_time_ms() follow it. The
  /// default start is 1970-01-01T00:00:00Z.
  void set_wall_time(wall_time w);

  time_point now() const;
  /// Wall-clock time as Unix epoch milliseconds, for values that must be absolute (legacy
  /// X-RateLimit-Reset, Date). Virtual time reports the clock's wall view (1970 + engine time unless
  /// set_wall_time moved it), as event timestamps do.
  std::int64_t wall_time_ms() const;
  scheduler& clock() noexcept;
  event_bus& events() noexcept;
  const std::string& id() const noexcept;
  route_runtime* find_route(std::string_view id) noexcept;
  const std::vector<std::unique_ptr<route_runtime>>& routes() const noexcept;

  /// The counters and readiness as now, from any thread (a scrape; not for a hot path).
  context_snapshot snapshot() const;
  /// Started, not stopping, and every route's source started (route:started). Any thread.
  bool ready() const;

  /// Runs `f` on the context's executor (from any thread).
  void post(std::function<void()> f);
  /// The io_context the context's threads run (components that own sockets: http). In virtual
  /// time nothing runs it on its own.
  boost::asio::io_context& io() noexcept;
  /// How many threads run io() (context_options::threads; 1 in virtual time).
  unsigned threads() const noexcept;
  /// Bookkeeping for work outside a route run that drain() must wait for (taps, replies).
  void work_started() noexcept;
  void work_finished() noexcept;
  /// A route's runs in flight went to zero (route_runtime counts them, not work_started()):
  /// wakes drain() and stop() when that made the context idle.
  void runs_ended() noexcept;

  // ---- calling a route from application code (rc/call.hpp, docs/operations.md) ----------------
  /// Runs `body` (and `headers`) through the route behind `endpoint` (rc::direct<T>("name")) and
  /// completes when the route has: throws its failure as an rc::error with the route's code,
  /// RC5004 when no route serves the endpoint, RC5031 when the route drops the exchange.
  template <callable_endpoint E>
  task<void> send(E endpoint, typename E::body_type body, call_headers headers = {}) {
    (void)co_await endpoint.invoke(*this, detail::call_exchange(std::move(body), std::move(headers)));
  }
  /// The same, returning the route's final body (RC5002 when it is not a Reply).
  template <class Reply, callable_endpoint E>
  task<Reply> request(E endpoint, typename E::body_type body, call_headers headers = {}) {
    exchange reply = co_await endpoint.invoke(*this, detail::call_exchange(std::move(body), std::move(headers)));
    co_return detail::take_reply<Reply>(reply, "request", endpoint);
  }
  /// Blocking forms, for main() and tests, on a started context and outside its threads. In real
  /// time the calling thread waits while the context's threads run the call; in virtual time the
  /// calling thread drives the clock until the call has finished (and no further).
  template <callable_endpoint E>
  void send_sync(E endpoint, typename E::body_type body, call_headers headers = {}) {
    block_on("send_sync",
             [this, endpoint = std::move(endpoint), body = std::move(body), headers = std::move(headers)]() mutable
             -> task<void> { return send(std::move(endpoint), std::move(body), std::move(headers)); });
  }
  template <class Reply, callable_endpoint E>
  Reply request_sync(E endpoint, typename E::body_type body, call_headers headers = {}) {
    auto reply = std::make_shared<std::optional<Reply>>();  // outlives a call that never finishes
    block_on("request_sync",
             [this, reply, endpoint = std::move(endpoint), body = std::move(body),
              headers = std::move(headers)]() mutable -> task<void> {
               return detail::store_reply(request<Reply>(std::move(endpoint), std::move(body), std::move(headers)),
                                          reply);
             });
    return std::move(**reply);
  }

  /// One shared instance of T per context (component registries: direct endpoints, HTTP
  /// servers). Created on first use with T(context&). Thread-safe.
  template <class T>
  T& service() {
    std::lock_guard lock(services_mutex_);
    auto& slot = services_[std::type_index(typeid(T))];
    if (!slot) slot = std::make_shared<T>(*this);
    return *static_cast<T*>(slot.get());
  }

  struct impl;

 private:
  /// Runs the task `make()` returns on the context's executor and waits for it (see send_sync);
  /// rethrows its failure. `call` names the caller in errors.
  void block_on(std::string_view call, std::function<task<void>()> make);

  std::unique_ptr<impl> impl_;
  std::mutex services_mutex_;
  std::unordered_map<std::type_index, std::shared_ptr<void>> services_;
};

}  // namespace rc
