// Routes: what the builder produces (route_definition) and what runs (route_runtime).
//
// The run list of a route follows one fixed chain, outside in, whatever order the builder calls
// came in (route_layer):
//   error( [parse, gate_1 ... gate_n, cache( circuit_breaker( retry( timeout( concurrency_1( ...
//       concurrency_m( user steps ))))))] )
// `parse` exists when the source parses its records (rc/parse.hpp): a flat step run once, before
// the gates, so a record that does not parse costs no token and the error handler sees it.
// Gates (throttle, slow_down, rate_limit) are flat steps in declaration order, each admitting
// once; the layers below them are segment wrappers that run the user steps as a nested run (so
// retry re-runs only what is below it). Among concurrency wrappers the first declared is
// outermost. The cache checks before the resilience layers and stores after the user steps, so
// a hit takes no concurrency slot, is never refused by an open breaker and needs no deadline.
// The builder says which wrappers exist; the runtime assembles the chain.
//
// The executor runs one exchange through a list of steps, one at a time. It emits the generic
// step events for steps that do not own theirs, normalises failures (plain exceptions become
// RC5001) and emits route:step:error once per failure, then the terminal exchange event.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "rc/clock.hpp"
#include "rc/events.hpp"
#include "rc/exchange.hpp"
#include "rc/metrics.hpp"
#include "rc/parse.hpp"
#include "rc/step.hpp"
#include "rc/task.hpp"

namespace rc {

class context;
class keyed_gate;
class route_runtime;
class source_context;
namespace detail {
struct shared_spawn;
}
class wrapper;

/// Where exchanges come from. `run` produces until it is finished (finite sources) or until the
/// intake signal fires, and returns.
class source_base {
 public:
  virtual ~source_base() = default;
  virtual std::string_view adapter() const = 0;
  virtual task<void> run(source_context& sc) = 0;
  /// Finite sources are waited for by drain(); a source that serves requests until stopped
  /// (direct, timer without a count, http) is not.
  virtual bool finite() const noexcept { return true; }
  /// Called when the route starts, on the thread that starts it (context::start(), or add() on a
  /// started context), before the source of any route of that start runs. A source that must not
  /// miss what other routes do from their first step (an event source's subscription) sets up
  /// here; run() follows.
  virtual void attach(route_runtime& rt) { (void)rt; }
  /// A source whose records need parsing returns the step that parses them (rc/parse.hpp); the
  /// route runs it first, and `mode` is the route's on_parse_error.
  virtual std::unique_ptr<step> make_parse_step(parse_error mode) {
    (void)mode;
    return nullptr;
  }
};

using segment_factory = std::function<std::unique_ptr<step>(std::unique_ptr<step> tail)>;

/// The place of a route-scope wrapper in the fixed chain, outermost first. The order is the
/// resilience convention: a throttled exchange never counts as a breaker failure, an exhausted
/// retry counts once, every attempt gets its own deadline, no concurrency slot is held during a
/// retry backoff, and a cache hit bypasses all of them (breaker, retry, timeout, concurrency).
enum class route_layer : std::uint8_t { error, gate, cache, circuit_breaker, retry, timeout, concurrency };

/// A route-scope wrapper: built around the part of the chain below its layer.
struct route_wrapper {
  route_layer layer;
  segment_factory wrap;
};

struct route_definition {
  std::string id;
  std::string title;
  std::string description;
  std::unique_ptr<source_base> source;
  parse_error on_parse_error = parse_error::fail;  // what a parsing source's bad record does
  std::vector<std::unique_ptr<step>> gates;        // route scope, admit once, declaration order
  std::vector<route_wrapper> wrappers;             // route scope, other layers (any order)
  std::vector<std::unique_ptr<step>> steps;        // the user pipeline
};

/// The result of one run: how it ended, and the exchange as it ended (for replies).
struct run_result {
  outcome result;
  exchange ex;
};

class route_runtime {
 public:
  route_runtime(context& ctx, route_definition def);
  ~route_runtime();

  const std::string& id() const noexcept { return def_.id; }
  const route_definition& definition() const noexcept { return def_; }
  context& ctx() noexcept { return ctx_; }
  // Inline and cached: every step of every exchange asks for the bus (and gates for the time).
  scheduler& clock() noexcept { return clock_; }
  event_bus& events() noexcept { return bus_; }
  time_point now() const { return clock_.now(); }
  /// Fires when the route stops taking new work: waits in gates end early and admit.
  cancel_signal& intake() noexcept { return intake_; }

  /// Runs one exchange through the whole route, emitting the lifecycle events. Never throws.
  task<run_result> process(exchange ex);
  /// The same when every step of the route is synchronous: no coroutine at all.
  run_result process_now(exchange ex);
  bool all_synchronous() const noexcept { return all_sync_; }

  /// Runs `steps` in order on `ex` (used by the top level and by segments). Never throws.
  task<outcome> run_steps(std::span<const std::unique_ptr<step>> steps, exchange& ex);
  /// The same when every one of `steps` is synchronous (a choice's branch).
  outcome run_steps_now(std::span<const std::unique_ptr<step>> steps, exchange& ex);

  /// A split child's own run through `steps` (rc/split.hpp): its route:exchange:started, the
  /// steps, its terminal event. Never throws; the outcome's error is normalised.
  task<outcome> run_child(std::span<const std::unique_ptr<step>> steps, exchange& child);
  /// The same when every one of `steps` is synchronous.
  outcome run_child_now(std::span<const std::unique_ptr<step>> steps, exchange& child);

  /// Stamps a fresh exchange for this route (route binding, operation "from").
  void adopt(exchange& ex) const noexcept { ex.set_route(this); }

  /// Runs begun and not yet ended. A run of a finite source that ends inside the source's
  /// emit() or spawn() (no step had to wait) is not counted: the source is still running then,
  /// and drain() and stop() wait for it.
  std::size_t in_flight() const noexcept { return in_flight_.load(std::memory_order_acquire); }
  /// Its source has started (route:started has been emitted); stays true.
  bool started() const noexcept { return started_.load(std::memory_order_acquire); }
  /// Its counters as now: in flight and every gate's (rc/metrics.hpp). Reads only; any thread.
  route_snapshot snapshot() const;

  /// The route's detached frames (its runs, its source, components' spawns for it): a forced
  /// stop may abandon some, and the context frees them when it is destroyed. Spawn with
  /// rc::spawn(rt.frames(), ...).
  detail::frame_set& frames() noexcept { return frames_; }

 private:
  friend class context;
  friend class source_context;
  // A run's start and end: its lifecycle events and, when `counted`, its place in in_flight_.
  void begin_run(exchange& ex, time_point& started, bool counted = true);
  // Whether a run of source_context::emit/spawn is counted from its start. A finite source's
  // runs need not be while they have not had to wait: drain() and stop() wait for the source
  // while it runs (context's finite_sources), and a run that ended before the source returned
  // cannot hold back the route's stop announcement. Such a run is counted (count_parked_run)
  // only when it parks at a step that waits. Two locked instructions fewer per exchange on a
  // sequential source.
  bool counts_every_run() const noexcept { return counts_every_run_; }
  void count_parked_run() noexcept { in_flight_.fetch_add(1, std::memory_order_acq_rel); }
  // Runs exchanges that in_flight_ counts already (source_context::spawn_batch): counted per
  // batch, not per exchange, so threads running batches do not write the same counter for every
  // exchange. Never throws.
  void run_batch(std::span<exchange> batch) noexcept;
  void end_run(exchange& ex, outcome& o, time_point started, bool counted = true);
  // n runs counted in in_flight_ are over: the last one announces a finished route stopped and
  // tells the context (its idle() reads in_flight_; route runs take no work_started()).
  void runs_ended(std::size_t n);
  // The lifecycle events of one exchange (a run's, or a split child's).
  void announce_started(const exchange& ex, time_point& started);
  void announce_ended(exchange& ex, outcome& o, time_point started);
  // Where a run is in its step list (route.cpp: advance, the one step loop).
  struct step_cursor {
    time_point started{};    // the current step's start, for its events
    std::uint32_t next = 0;  // the current step
    bool pending = false;    // awaiting the current step: the caller's outcome is its result
    bool events_on = false;  // the current step gets generic step events
  };
  bool advance(std::span<const std::unique_ptr<step>> steps, step_cursor& c, exchange& ex, outcome& o);
  bool finish_now(step& s, step_cursor& c, exchange& ex, outcome& r);
  // A run of source_context::spawn / emit starts synchronously and becomes a coroutine only at a
  // step that waits (`c` there): it continues from that step. spawn_run's frame is the only one
  // a parked exchange costs, and holds the exchange.
  detail::detached spawn_run(exchange ex, step_cursor c, time_point started, outcome o);
  task<run_result> process_from(exchange ex, step_cursor c, time_point started, outcome o);
  bool before_step(step& s, exchange& ex, time_point& started);
  void after_step(step& s, exchange& ex, outcome& o, bool events, time_point started);
  // route:stopping / route:stopped fire once per route: when its finite source has finished and
  // its last exchange has ended (so they follow that exchange's terminal event, as in the
  // reference's canonical sequence), or else from stop(). Announcing does not close intake.
  void announce_stopped();
  /// Builds run_list_ from the definition's gates, wrappers and steps (the fixed chain).
  void assemble_chain();
  bool claim_stop_announcement() noexcept { return !stop_announced_.exchange(true); }

  context& ctx_;
  scheduler& clock_;
  event_bus& bus_;
  route_definition def_;
  std::vector<std::unique_ptr<step>> run_list_;
  bool all_sync_ = true;
  bool counts_every_run_ = true;  // false for a finite source (counts_every_run())
  cancel_signal intake_;
  std::atomic<std::size_t> in_flight_{0};
  std::atomic<bool> source_done_{false};  // the finite source has returned
  std::atomic<bool> stop_announced_{false};
  std::atomic<bool> started_{false};
  // The route's gates in chain order, found once when the chain is built (snapshot() reads them).
  std::vector<std::pair<const wrapper*, const keyed_gate*>> gates_;
  detail::frame_set frames_;
};

/// What source_context::emit returns: `co_await` it for the run's result. A route whose steps
/// are all synchronous has already run by then (no coroutine frame, no suspension).
class emit_awaiter {
 public:
  explicit emit_awaiter(run_result done) : done_(std::move(done)) {}
  explicit emit_awaiter(task<run_result> running) : running_(std::move(running)) {}

  bool await_ready() const noexcept { return done_.has_value(); }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
    return running_->await_suspend(awaiting);
  }
  run_result await_resume() { return done_ ? std::move(*done_) : running_->await_resume(); }

 private:
  std::optional<run_result> done_;
  std::optional<task<run_result>> running_;
};

/// What a source sees: its route, the intake signal, the clock, and emit/spawn.
class source_context {
 public:
  explicit source_context(route_runtime& rt) : route_(rt) {}

  route_runtime& route() noexcept { return route_; }
  bool stopping() const noexcept { return route_.intake().fired(); }
  time_point now() const { return route_.now(); }
  /// Sleeps until `t` or until the route stops taking work.
  auto sleep_until(time_point t) { return route_.clock().wait_until(t, &route_.intake()); }

  /// Runs the exchange through the route; `co_await` the result to wait for it (natural
  /// backpressure). Await it at once: a synchronous route runs inside this call.
  [[nodiscard]] emit_awaiter emit(exchange ex);
  /// Starts the exchange and returns at its first wait; drain() waits for it.
  void spawn(exchange ex);
  /// spawn() for each of `batch` (moved from), as one piece of work. On a context with several
  /// threads the batch is shared out: the other threads take their share as one handler each
  /// while this one runs its own. Exchanges of one batch may then run in any order, as they
  /// would if spawned one by one from several threads.
  void spawn_batch(std::span<exchange> batch);
  /// Sets the body of the `i`-th exchange of spawn_shared (called once for each i, from any of
  /// the context's threads, never twice at once for one i). `state` is spawn_shared's.
  using fill_fn = void (*)(void* state, std::size_t i, exchange& ex);
  /// Makes and starts `count` exchanges, the i-th carrying what `fill` sets, each as spawn()
  /// would (it runs until its first wait); completes when every one has started, or when the
  /// route stops taking work (the rest are never made). On a context with several threads, every
  /// thread takes chunks of indexes in turn and makes and starts its own, so no exchange moves
  /// between threads, no counter is written per exchange, and no thread idles while indexes are
  /// left. Exchanges may then start in any order. Something `fill` throws ends it: the chunk it
  /// was making is dropped and the exception comes out of the co_await once the threads are done.
  task<void> spawn_shared(std::size_t count, fill_fn fill, void* state);
  /// A fresh exchange carrying `body`, bound to this route.
  template <class T>
  exchange make(T&& body) {
    exchange ex;
    ex.set_body(std::forward<T>(body));
    route_.adopt(ex);
    return ex;
  }

 private:
  // spawn_shared: makes and runs one chunk; false when none is left (or the route stops).
  bool run_chunk(detail::shared_spawn& s, std::vector<exchange>& buf);
  // spawn_shared on another thread: a chunk per handler, then queued again behind what waits.
  void help_shared(detail::shared_spawn& s, std::vector<exchange> buf);

  route_runtime& route_;
};

}  // namespace rc
