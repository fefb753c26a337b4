#include "rc/route.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <iterator>
#include <map>

#include "rc/choice.hpp"
#include "rc/context.hpp"
#include "rc/error.hpp"
#include "rc/event_details.hpp"
#include "rc/shaping.hpp"
#include "rc/split.hpp"
#include "rc/wrappers/keyed_gate.hpp"

namespace rc {
namespace {

// A segment: runs a list of steps as a nested run (the segment wrappers, such as retry, wrap it).
class segment_step final : public step {
 public:
  explicit segment_step(std::vector<std::unique_ptr<step>> steps) : steps_(std::move(steps)) {}
  std::string_view operation() const override { return "route"; }
  bool owns_events() const noexcept override { return true; }
  task<outcome> run(exchange& ex, route_runtime& rt) override { return rt.run_steps(steps_, ex); }
  std::vector<std::unique_ptr<step>>& steps() noexcept { return steps_; }

 private:
  std::vector<std::unique_ptr<step>> steps_;
};

// Names every wrapper of the route "<kind>#<n>", in chain order: the route-scope wrappers in
// their fixed order (gates in declaration order), then the user steps' wrappers, each step's
// nested outermost first.
// The gates among them that keep counters (throttle, slow_down, rate_limit) are collected for
// metrics, and every step it passes is listed (seen()) to be frozen once all are named.
class gate_namer {
 public:
  gate_namer(std::vector<std::pair<const wrapper*, const keyed_gate*>>& gates, unsigned threads)
      : gates_(gates), threads_(threads) {}

  void name(step* s) {
    while (s != nullptr) {
      seen_.push_back(s);
      if (auto* w = dynamic_cast<wrapper*>(s)) {
        const std::string_view kind = w->wrapper_kind();
        w->set_gate_id(fmt::format("{}#{}", kind, ++counts_[std::string(kind)]));
        w->attach(threads_);
        if (const auto* g = dynamic_cast<const keyed_gate*>(w); g != nullptr && g->has_counters())
          gates_.emplace_back(w, g);
        s = w->inner();
      } else {
        if (auto* seg = dynamic_cast<segment_step*>(s))
          for (auto& u : seg->steps()) name(u.get());
        else if (auto* split = dynamic_cast<split_step*>(s))
          for (auto& u : split->sub_steps()) name(u.get());
        else if (auto* choice = dynamic_cast<choice_step*>(s)) {
          name(choice->selection().get());
          for (auto& b : choice->branches())
            for (auto& u : b.steps) name(u.get());
        } else if (auto* multicast = dynamic_cast<multicast_step*>(s)) {
          for (auto& b : multicast->branches())
            for (auto& u : b) name(u.get());
        } else if (auto* batch = dynamic_cast<batch_step*>(s)) {
          for (auto& u : batch->sub_steps()) name(u.get());
        }
        return;
      }
    }
  }

  const std::vector<step*>& seen() const noexcept { return seen_; }

 private:
  std::vector<step*> seen_;
  std::map<std::string, int> counts_;
  std::vector<std::pair<const wrapper*, const keyed_gate*>>& gates_;
  unsigned threads_;
};

task<outcome> failed_now(std::exception_ptr e) { co_return outcome::failed(std::move(e)); }

// Awaits one asynchronous step of the loop; whatever it throws becomes a failed outcome (not yet
// normalised: after_step does that). Holds only the step's task, as a plain co_await would.
class step_awaiter {
 public:
  step_awaiter(step& s, exchange& ex, route_runtime& rt, outcome&& partial)
      : running_(start(s, ex, rt, std::move(partial))) {}
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> h) noexcept { return running_.await_suspend(h); }
  outcome await_resume() noexcept {
    try {
      return running_.await_resume();
    } catch (...) {
      return outcome::failed(std::current_exception());
    }
  }

 private:
  static task<outcome> start(step& s, exchange& ex, route_runtime& rt, outcome&& partial) {
    try {
      return s.resume(ex, rt, std::move(partial));
    } catch (...) {
      return failed_now(std::current_exception());
    }
  }
  task<outcome> running_;
};

nlohmann::json x_fields(const route_runtime& rt, const exchange& ex) {
  return {{"routeId", rt.id()}, {"exchangeId", ex.id()}, {"correlationId", ex.correlation_id()}};
}

}  // namespace

route_runtime::route_runtime(context& ctx, route_definition def)
    : ctx_(ctx), clock_(ctx.clock()), bus_(ctx.events()), def_(std::move(def)), intake_(ctx.clock()) {
  assemble_chain();
  for (const auto& s : run_list_) all_sync_ = all_sync_ && s->synchronous();
  counts_every_run_ = def_.source == nullptr || !def_.source->finite();
  gate_namer namer(gates_, ctx.threads());
  for (const auto& s : run_list_) namer.name(s.get());
  for (step* s : namer.seen()) s->freeze();  // after every wrapper is named and attached
}

route_snapshot route_runtime::snapshot() const {
  route_snapshot r;
  r.id = id();
  r.started = started();
  r.in_flight = in_flight();
  r.gates.reserve(gates_.size());
  for (const auto& [w, g] : gates_) {
    gate_snapshot& s = r.gates.emplace_back(g->read_counters());
    s.id = w->gate_id();
    s.kind = std::string(w->wrapper_kind());
    s.label = std::string(g->gate_label());
  }
  return r;
}

route_runtime::~route_runtime() = default;

void route_runtime::assemble_chain() {
  // Stable: wrappers of one layer keep their declaration order (concurrency: first outermost).
  auto& wrappers = def_.wrappers;
  std::stable_sort(wrappers.begin(), wrappers.end(),
                   [](const route_wrapper& a, const route_wrapper& b) { return a.layer < b.layer; });
  const auto below_gates = std::find_if(wrappers.begin(), wrappers.end(),
                                        [](const route_wrapper& w) { return w.layer > route_layer::gate; });

  // The part below the gates: the user steps, flat when nothing wraps them.
  std::vector<std::unique_ptr<step>> chain;
  if (def_.source)
    if (auto parse = def_.source->make_parse_step(def_.on_parse_error)) chain.push_back(std::move(parse));
  for (auto& g : def_.gates) chain.push_back(std::move(g));
  def_.gates.clear();
  if (below_gates == wrappers.end()) {
    for (auto& s : def_.steps) chain.push_back(std::move(s));
  } else {
    std::unique_ptr<step> tail = std::make_unique<segment_step>(std::move(def_.steps));
    for (auto it = wrappers.end(); it != below_gates;) tail = (--it)->wrap(std::move(tail));
    chain.push_back(std::move(tail));
  }
  def_.steps.clear();

  // Above the gates: the error handler(s) wrap the whole run.
  if (below_gates == wrappers.begin()) {
    run_list_ = std::move(chain);
  } else {
    std::unique_ptr<step> whole = std::make_unique<segment_step>(std::move(chain));
    for (auto it = below_gates; it != wrappers.begin();) whole = (--it)->wrap(std::move(whole));
    run_list_.push_back(std::move(whole));
  }
  wrappers.clear();
}

bool route_runtime::before_step(step& s, exchange& ex, time_point& started) {
  ex.set_operation(s.loop_label());
  if (s.loop_owns_events()) return false;
  auto& bus = events();
  if (bus.listening(event_id::step_completed) || bus.listening(event_id::step_failed)) started = now();
  bus.emit(event_id::step_started, [&] { return step_event{{this, &ex}, &s}; });
  return true;
}

void route_runtime::after_step(step& s, exchange& ex, outcome& o, bool events_on, time_point started) {
  auto& bus = events();
  if (o.is_fail()) {
    if (o.reported) return;  // a nested run already reported it
    // A step failing because a timeout's deadline passed: the timeout wrapper reports it.
    if (const cancel_signal* a = ex.abort_signal(); a != nullptr && a->deadline_passed()) {
      o.reported = true;
      return;
    }
    if (events_on && s.reports_failure())
      bus.emit(event_id::step_failed, [&] {
        auto j = x_fields(*this, ex);
        j["operation"] = s.label();
        if (!s.adapter().empty()) j["adapter"] = s.adapter();
        j["duration"] = to_ms(now() - started);
        j["error"] = message_of(o.error);
        return j;
      });
    normalise_in_place(o.error);
    o.reported = true;
    bus.emit(event_id::step_error, [&] {
      return nlohmann::json{
          {"routeId", id()}, {"error", error_json(o.error)}, {"operation", s.label()}, {"exchange", ex.to_json()}};
    });
    return;
  }
  if (events_on) bus.emit(event_id::step_completed, [&] { return step_event{{this, &ex}, &s, true, now() - started}; });
}

// After a step that may have let time pass: when a timeout's deadline has passed (only a timeout
// wrapper installs one), the run schedules nothing more and ends in `o`, already reported (the
// timeout wrapper reports it).
static bool deadline_ended(const exchange& ex, outcome& o) {
  const cancel_signal* a = ex.abort_signal();
  if (a == nullptr || !a->deadline_passed()) return false;
  o = outcome::failed(std::make_exception_ptr(error(errc::timed_out, "deadline passed", true)));
  o.reported = true;
  return true;
}

// The executor's one step loop. Runs steps from the cursor while they complete synchronously;
// returns true when the list is done (`o` says how: the first failure or drop ends it), or false
// at an asynchronous step, which the caller awaits (step_awaiter: the step's resume() from `o`,
// where try_run_now left it) into `o` and hands back by
// calling advance again. run_steps, run_steps_now and spawn_run all drive this one loop, so a
// parked exchange costs its caller's frame only (no frame for the loop itself), and the caller
// owns the outcome (run_steps_now returns it without a copy).
[[gnu::always_inline]] inline bool route_runtime::advance(std::span<const std::unique_ptr<step>> steps, step_cursor& c,
                                                          exchange& ex, outcome& o) {
  if (c.pending) {
    c.pending = false;
    after_step(*steps[c.next], ex, o, c.events_on, c.started);
    if (!o.ok() || deadline_ended(ex, o)) return true;
    ++c.next;
  }
  for (; c.next < steps.size(); ++c.next) {
    step& s = *steps[c.next];
    c.started = {};
    c.events_on = before_step(s, ex, c.started);
    if (!s.loop_synchronous()) {
      // It may still finish at once (a bulkhead with a free slot): then no frame, no await.
      if (finish_now(s, c, ex, o)) continue;
      return !c.pending;  // pending: awaited from `o`; else the run ended in `o`
    }
    // A local, moved out only when it ends the run: the synchronous fast path (rc-bench
    // plain_seq) pays no outcome assignment per step.
    outcome r = run_now_guarded(s, ex, *this);
    after_step(s, ex, r, c.events_on, c.started);
    if (!r.ok()) {
      o = std::move(r);
      return true;
    }
  }
  return true;  // o is proceed, or the last awaited step's ok outcome
}

// A step that is not synchronous(): true when try_run_now finished it and the loop goes on.
// Otherwise `o` is what ended the run, or (c.pending) what the step's resume() goes on from.
// Out of line: the synchronous loop stays as small as it was (rc-bench plain_seq).
[[gnu::noinline]] bool route_runtime::finish_now(step& s, step_cursor& c, exchange& ex, outcome& o) {
  outcome r;
  if (!try_run_now_guarded(s, ex, *this, r)) {
    o = std::move(r);
    c.pending = true;
    return false;
  }
  after_step(s, ex, r, c.events_on, c.started);
  if (!r.ok()) {
    o = std::move(r);
    return false;
  }
  return !deadline_ended(ex, o);  // as after an awaited step
}

task<outcome> route_runtime::run_steps(std::span<const std::unique_ptr<step>> steps, exchange& ex) {
  outcome o;
  step_cursor c;
  while (!advance(steps, c, ex, o)) o = co_await step_awaiter(*steps[c.next], ex, *this, std::move(o));
  co_return o;
}

outcome route_runtime::run_steps_now(std::span<const std::unique_ptr<step>> steps, exchange& ex) {
  outcome o;
  step_cursor c;
  advance(steps, c, ex, o);  // every step is synchronous: never stops at an await
  return o;
}

namespace {
// The lifecycle events of one exchange. Templates only so that a run's copy (begin_run, end_run)
// keeps its own event lambdas, inlined as before split existed (rc-bench plain_seq), while split
// children (run_child) use the other copy; `Child` changes nothing else.
template <bool Child>
[[gnu::always_inline]] inline void emit_started(route_runtime& rt, const exchange& ex, time_point& started) {
  auto& bus = rt.events();
  if (bus.listening(event_id::exchange_completed) || bus.listening(event_id::exchange_failed)) started = rt.now();
  bus.emit(event_id::exchange_started, [&] { return exchange_event{{&rt, &ex}}; });
}

template <bool Child>
[[gnu::always_inline]] inline void emit_ended(route_runtime& rt, exchange& ex, outcome& o, time_point started) {
  ex.run_finish_hooks(o.ok());
  auto& bus = rt.events();
  switch (o.what) {
    case outcome::kind::proceed:
      bus.emit(event_id::exchange_completed, [&] { return exchange_event{{&rt, &ex}, true, rt.now() - started}; });
      break;
    case outcome::kind::drop:
      bus.emit(event_id::exchange_dropped, [&] {
        auto j = x_fields(rt, ex);
        j["reason"] = o.reason;
        j["exchange"] = ex.to_json();
        return j;
      });
      break;
    case outcome::kind::fail: {
      normalise_in_place(o.error);
      bus.emit(event_id::route_error, [&] {
        return nlohmann::json{{"routeId", rt.id()}, {"error", error_json(o.error)}, {"exchange", ex.to_json()}};
      });
      bus.emit(event_id::context_error, [&] {
        return nlohmann::json{{"error", error_json(o.error)}, {"route", rt.id()}, {"exchange", ex.to_json()}};
      });
      bus.emit(event_id::exchange_failed, [&] {
        auto j = x_fields(rt, ex);
        j["duration"] = to_ms(rt.now() - started);
        j["error"] = error_json(o.error);
        j["exchange"] = ex.to_json();
        return j;
      });
      break;
    }
  }
}

}  // namespace

void route_runtime::begin_run(exchange& ex, time_point& started, bool counted) {
  if (counted) in_flight_.fetch_add(1, std::memory_order_acq_rel);  // what drain() waits for (context::impl::idle)
  ex.set_route(this);
  emit_started<false>(*this, ex, started);
}

void route_runtime::end_run(exchange& ex, outcome& o, time_point started, bool counted) {
  emit_ended<false>(*this, ex, o, started);
  if (counted) runs_ended(1);
}

void route_runtime::runs_ended(std::size_t n) {
  // seq_cst, paired with context::impl::run_source: of the last run ending and the source
  // finishing, whichever comes second sees the other and announces the route stopped.
  if (in_flight_.fetch_sub(n) != n) return;
  if (source_done_.load()) announce_stopped();
  ctx_.runs_ended();
}

void route_runtime::announce_started(const exchange& ex, time_point& started) {
  emit_started<true>(*this, ex, started);
}

void route_runtime::announce_ended(exchange& ex, outcome& o, time_point started) {
  emit_ended<true>(*this, ex, o, started);
}

task<outcome> route_runtime::run_child(std::span<const std::unique_ptr<step>> steps, exchange& child) {
  time_point started{};
  announce_started(child, started);
  outcome o = co_await run_steps(steps, child);
  announce_ended(child, o, started);
  co_return o;
}

outcome route_runtime::run_child_now(std::span<const std::unique_ptr<step>> steps, exchange& child) {
  time_point started{};
  announce_started(child, started);
  outcome o = run_steps_now(steps, child);
  announce_ended(child, o, started);
  return o;
}

void route_runtime::announce_stopped() {
  if (!claim_stop_announcement()) return;
  bus_.emit(event_id::route_stopping, [&] { return nlohmann::json{{"routeId", id()}}; });
  bus_.emit(event_id::route_stopped, [&] { return nlohmann::json{{"routeId", id()}}; });
}

task<run_result> route_runtime::process(exchange ex) {
  time_point started{};
  begin_run(ex, started);
  outcome o = co_await run_steps(run_list_, ex);
  end_run(ex, o, started);
  co_return run_result{std::move(o), std::move(ex)};
}

run_result route_runtime::process_now(exchange ex) {
  time_point started{};
  begin_run(ex, started);
  outcome o = run_steps_now(run_list_, ex);
  end_run(ex, o, started);
  return run_result{std::move(o), std::move(ex)};
}

detail::detached route_runtime::spawn_run(exchange ex, step_cursor c, time_point started, outcome o) {
  detail::frame_set::member tracked(frames_, co_await detail::this_frame{});
  // The loop driven here, not through run_steps: awaiting run_steps would add a frame to every
  // parked exchange.
  do o = co_await step_awaiter(*run_list_[c.next], ex, *this, std::move(o));
  while (!advance(run_list_, c, ex, o));
  end_run(ex, o, started);
}

task<run_result> route_runtime::process_from(exchange ex, step_cursor c, time_point started, outcome o) {
  do o = co_await step_awaiter(*run_list_[c.next], ex, *this, std::move(o));
  while (!advance(run_list_, c, ex, o));
  end_run(ex, o, started);
  co_return run_result{std::move(o), std::move(ex)};
}

emit_awaiter source_context::emit(exchange ex) {
  // Synchronously until a step has to wait; a coroutine only from there.
  time_point started{};
  const bool counted = route_.counts_every_run();  // else counted only if it parks
  route_.begin_run(ex, started, counted);
  outcome o;
  route_runtime::step_cursor c;
  if (route_.all_synchronous()) {
    o = route_.run_steps_now(route_.run_list_, ex);
  } else if (!route_.advance(route_.run_list_, c, ex, o)) {
    if (!counted) route_.count_parked_run();
    return emit_awaiter(route_.process_from(std::move(ex), c, started, std::move(o)));
  }
  route_.end_run(ex, o, started, counted);
  return emit_awaiter(run_result{std::move(o), std::move(ex)});
}

void route_runtime::run_batch(std::span<exchange> batch) noexcept {
  std::size_t parked = 0;
  for (exchange& ex : batch) {
    time_point started{};
    ex.set_route(this);
    emit_started<false>(*this, ex, started);
    outcome o;
    if (all_sync_) {
      o = run_steps_now(run_list_, ex);
    } else {
      route_runtime::step_cursor c;
      if (!advance(run_list_, c, ex, o)) {
        // Parked at a step that waits: from here it is a run of its own (end_run counts it out).
        ++parked;
        spawn_run(std::move(ex), c, started, std::move(o));
        continue;
      }
    }
    emit_ended<false>(*this, ex, o, started);
  }
  const std::size_t ended = batch.size() - parked;
  if (ended > 0) runs_ended(ended);
}

void source_context::spawn_batch(std::span<exchange> batch) {
  if (batch.empty()) return;
  const std::size_t threads = route_.ctx().threads();
  // Shares smaller than this cost more in hand-off (a post, perhaps a wake-up) than they save.
  constexpr std::size_t min_share = 32;
  if (threads < 2 || batch.size() < 2 * min_share) {
    for (exchange& ex : batch) spawn(std::move(ex));
    return;
  }
  const std::size_t shares = std::min(threads, batch.size() / min_share);
  route_.in_flight_.fetch_add(batch.size(), std::memory_order_acq_rel);
  // This thread keeps half a share: it has made the whole batch already, and the others' shares
  // start while it runs its own. If the others fall behind, their shares wait in the executor's
  // queue, and this thread takes them before it goes on when its source gives way (simple() does
  // after each batch).
  const std::size_t own = std::max<std::size_t>(1, batch.size() / (2 * shares));
  const std::size_t share = (batch.size() - own) / (shares - 1);
  for (std::size_t k = 1; k < shares; ++k) {
    const auto first = batch.begin() + static_cast<std::ptrdiff_t>(own + (k - 1) * share);
    const auto last = k + 1 == shares ? batch.end() : first + static_cast<std::ptrdiff_t>(share);
    std::vector<exchange> part(std::make_move_iterator(first), std::make_move_iterator(last));
    boost::asio::post(route_.ctx().io(), [rt = &route_, part = std::move(part)]() mutable { rt->run_batch(part); });
  }
  route_.run_batch(batch.first(own));
}

namespace detail {

// What the threads of one spawn_shared share. It lives in spawn_shared's frame, which goes on
// only when every thread has finished with it. `next` is the one field written by all of them,
// once per chunk.
struct shared_spawn {
  // Large enough that claiming a chunk, counting it in flight and queueing the next one cost
  // nothing per exchange; small enough that timers and sockets get in often (about 100 us).
  static constexpr std::size_t chunk = 1024;

  source_context::fill_fn fill;
  void* state;
  std::size_t count;
  std::atomic<std::size_t> next{0};  // the first index no thread has claimed yet
  // Threads still taking chunks, spawn_shared's own included; the last one out resumes it.
  std::atomic<unsigned> running{0};
  std::coroutine_handle<> waiter;
  std::atomic<bool> failed{false};
  std::exception_ptr failure;  // written once, by whoever set `failed`

  // spawn_shared's last wait: until the other threads are done with their chunks.
  struct joined {
    shared_spawn& s;
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> h) noexcept {
      s.waiter = h;  // before the decrement: the thread that sees it reach zero resumes h
      return s.running.fetch_sub(1, std::memory_order_acq_rel) != 1;
    }
    void await_resume() const noexcept {}
  };
};

}  // namespace detail

bool source_context::run_chunk(detail::shared_spawn& s, std::vector<exchange>& buf) {
  if (stopping() || s.failed.load(std::memory_order_relaxed)) return false;
  const std::size_t first = s.next.fetch_add(detail::shared_spawn::chunk, std::memory_order_relaxed);
  if (first >= s.count) return false;
  const std::size_t last = first + std::min(detail::shared_spawn::chunk, s.count - first);
  std::uint64_t id = exchange::reserve_ids(last - first);
  buf.reserve(last - first);
  try {
    for (std::size_t i = first; i < last; ++i) {
      exchange& ex = buf.emplace_back(id++);
      s.fill(s.state, i, ex);
      route_.adopt(ex);
    }
  } catch (...) {
    buf.clear();
    if (!s.failed.exchange(true)) s.failure = std::current_exception();
    return false;
  }
  route_.in_flight_.fetch_add(buf.size(), std::memory_order_acq_rel);
  route_.run_batch(buf);
  buf.clear();
  return true;
}

void source_context::help_shared(detail::shared_spawn& s, std::vector<exchange> buf) {
  if (run_chunk(s, buf)) {
    boost::asio::post(route_.ctx().io(),
                      [this, &s, buf = std::move(buf)]() mutable { help_shared(s, std::move(buf)); });
    return;
  }
  // acq_rel: spawn_shared's waiter was stored before its own decrement.
  if (s.running.fetch_sub(1, std::memory_order_acq_rel) == 1) s.waiter.resume();
}

task<void> source_context::spawn_shared(std::size_t count, fill_fn fill, void* state) {
  if (count == 0) co_return;
  detail::shared_spawn s{.fill = fill, .state = state, .count = count};
  const std::size_t threads = route_.ctx().threads();
  // No more helpers than chunks beyond this thread's first.
  const std::size_t helpers = std::min<std::size_t>(threads - 1, (count - 1) / detail::shared_spawn::chunk);
  s.running.store(static_cast<unsigned>(helpers + 1), std::memory_order_relaxed);
  for (std::size_t k = 0; k < helpers; ++k) boost::asio::post(route_.ctx().io(), [this, &s] { help_shared(s, {}); });
  std::vector<exchange> buf;
  // Between chunks, what else is queued (timers, sockets, the other threads' work) gets in.
  while (run_chunk(s, buf)) co_await route_.clock().yield();
  co_await detail::shared_spawn::joined{s};
  if (s.failure) std::rethrow_exception(s.failure);
}

void source_context::spawn(exchange ex) {
  time_point started{};
  const bool counted = route_.counts_every_run();  // else counted only if it parks
  route_.begin_run(ex, started, counted);
  outcome o;
  route_runtime::step_cursor c;
  // As emit(), without a run_result: nobody reads it, so the exchange is not moved into one.
  if (route_.all_synchronous()) {
    o = route_.run_steps_now(route_.run_list_, ex);
  } else if (!route_.advance(route_.run_list_, c, ex, o)) {
    if (!counted) route_.count_parked_run();
    // Not rc::spawn(lambda -> process()): that parks the exchange twice (in the lambda and in
    // process()'s frame) plus a run_result, across three frames. A parked exchange's memory is
    // what a deep backlog costs (rc-bench delay0, inflight).
    route_.spawn_run(std::move(ex), c, started, std::move(o));
    return;
  }
  route_.end_run(ex, o, started, counted);
}

}  // namespace rc
