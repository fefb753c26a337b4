#include "rc/route.hpp"

#include <algorithm>

#include "rc/context.hpp"
#include "rc/error.hpp"

namespace rc {
namespace {

// A segment: runs a list of steps as a nested run (the segment wrappers, such as retry, wrap it).
class segment_step final : public step {
 public:
  explicit segment_step(std::vector<std::unique_ptr<step>> steps) : steps_(std::move(steps)) {}
  std::string_view operation() const override { return "route"; }
  bool owns_events() const noexcept override { return true; }
  task<outcome> run(exchange& ex, route_runtime& rt) override { return rt.run_steps(steps_, ex); }

 private:
  std::vector<std::unique_ptr<step>> steps_;
};

nlohmann::json error_json(const std::exception_ptr& e) {
  const error err = to_error(e);
  nlohmann::json j = {{"code", err.code_string()}, {"message", err.message()}, {"retryable", err.retryable()}};
  if (!err.details().empty()) j["details"] = err.details();
  return j;
}

nlohmann::json x_fields(const route_runtime& rt, const exchange& ex) {
  return {{"routeId", rt.id()}, {"exchangeId", ex.id()}, {"correlationId", ex.correlation_id()}};
}

}  // namespace

route_runtime::route_runtime(context& ctx, route_definition def)
    : ctx_(ctx), clock_(ctx.clock()), bus_(ctx.events()), def_(std::move(def)), intake_(ctx.clock()) {
  assemble_chain();
  for (const auto& s : run_list_) all_sync_ = all_sync_ && s->synchronous();
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
  ex.set_operation(s.label());
  if (s.owns_events()) return false;
  auto& bus = events();
  if (bus.listening(event_id::step_completed) || bus.listening(event_id::step_failed)) started = now();
  bus.emit(event_id::step_started, [&] {
    auto j = x_fields(*this, ex);
    j["operation"] = s.label();
    if (!s.adapter().empty()) j["adapter"] = s.adapter();
    return j;
  });
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
    o.error = normalise(o.error);
    o.reported = true;
    bus.emit(event_id::step_error, [&] {
      return nlohmann::json{
          {"routeId", id()}, {"error", error_json(o.error)}, {"operation", s.label()}, {"exchange", ex.to_json()}};
    });
    return;
  }
  if (events_on)
    bus.emit(event_id::step_completed, [&] {
      auto j = x_fields(*this, ex);
      j["operation"] = s.label();
      if (!s.adapter().empty()) j["adapter"] = s.adapter();
      j["duration"] = to_ms(now() - started);
      return j;
    });
}

// spawn_run() repeats this loop in its own frame: keep the two in step.
task<outcome> route_runtime::run_steps(std::span<const std::unique_ptr<step>> steps, exchange& ex) {
  for (const auto& s : steps) {
    time_point started{};
    const bool events_on = before_step(*s, ex, started);
    // (no co_await inside ?: — GCC 12 miscompiles temporaries there)
    outcome o;
    if (s->synchronous()) {
      o = run_now_guarded(*s, ex, *this);
    } else {
      // run_guarded inlined: one coroutine frame less per waiting exchange.
      try {
        o = co_await s->run(ex, *this);
      } catch (...) {
        o = outcome::failed(std::current_exception());
      }
    }
    after_step(*s, ex, o, events_on, started);
    if (!o.ok()) co_return o;
    // A timeout's deadline passed (only a timeout wrapper installs one): schedule nothing more.
    if (const cancel_signal* a = ex.abort_signal(); a != nullptr && a->deadline_passed()) {
      o = outcome::failed(std::make_exception_ptr(error(errc::timed_out, "deadline passed", true)));
      o.reported = true;
      co_return o;
    }
  }
  co_return outcome::proceed();
}

outcome route_runtime::run_steps_now(std::span<const std::unique_ptr<step>> steps, exchange& ex) {
  for (const auto& s : steps) {
    time_point started{};
    const bool events_on = before_step(*s, ex, started);
    outcome o = run_now_guarded(*s, ex, *this);
    after_step(*s, ex, o, events_on, started);
    if (!o.ok()) return o;
  }
  return outcome::proceed();
}

void route_runtime::begin_run(exchange& ex, time_point& started) {
  in_flight_.fetch_add(1, std::memory_order_acq_rel);
  ctx_.work_started();
  ex.set_route(this);
  auto& bus = events();
  if (bus.listening(event_id::exchange_completed) || bus.listening(event_id::exchange_failed)) started = now();
  bus.emit(event_id::exchange_started, [&] { return x_fields(*this, ex); });
}

void route_runtime::end_run(exchange& ex, outcome& o, time_point started) {
  ex.run_finish_hooks(o.ok());
  auto& bus = events();
  switch (o.what) {
    case outcome::kind::proceed:
      bus.emit(event_id::exchange_completed, [&] {
        auto j = x_fields(*this, ex);
        j["duration"] = to_ms(now() - started);
        j["exchange"] = ex.to_json();
        return j;
      });
      break;
    case outcome::kind::drop:
      bus.emit(event_id::exchange_dropped, [&] {
        auto j = x_fields(*this, ex);
        j["reason"] = o.reason;
        j["exchange"] = ex.to_json();
        return j;
      });
      break;
    case outcome::kind::fail: {
      o.error = normalise(o.error);
      bus.emit(event_id::route_error, [&] {
        return nlohmann::json{{"routeId", id()}, {"error", error_json(o.error)}, {"exchange", ex.to_json()}};
      });
      bus.emit(event_id::context_error, [&] {
        return nlohmann::json{{"error", error_json(o.error)}, {"route", id()}, {"exchange", ex.to_json()}};
      });
      bus.emit(event_id::exchange_failed, [&] {
        auto j = x_fields(*this, ex);
        j["duration"] = to_ms(now() - started);
        j["error"] = error_json(o.error);
        j["exchange"] = ex.to_json();
        return j;
      });
      break;
    }
  }
  // seq_cst, paired with context::impl::run_source: of the last run ending and the source
  // finishing, whichever comes second sees the other and announces the route stopped.
  if (in_flight_.fetch_sub(1) == 1 && source_done_.load()) announce_stopped();
  ctx_.work_finished();
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

detail::detached route_runtime::spawn_run(exchange ex) {
  time_point started{};
  begin_run(ex, started);
  // run_steps' loop, inlined: awaiting run_steps would add a frame to every parked exchange.
  outcome o;
  for (const auto& s : run_list_) {
    time_point step_started{};
    const bool events_on = before_step(*s, ex, step_started);
    if (s->synchronous()) {
      o = run_now_guarded(*s, ex, *this);
    } else {
      try {
        o = co_await s->run(ex, *this);
      } catch (...) {
        o = outcome::failed(std::current_exception());
      }
    }
    after_step(*s, ex, o, events_on, step_started);
    if (!o.ok()) break;
  }
  end_run(ex, o, started);
}

emit_awaiter source_context::emit(exchange ex) {
  if (route_.all_synchronous()) return emit_awaiter(route_.process_now(std::move(ex)));
  return emit_awaiter(route_.process(std::move(ex)));
}

void source_context::spawn(exchange ex) {
  if (route_.all_synchronous()) {
    (void)route_.process_now(std::move(ex));
    return;
  }
  // Not rc::spawn(lambda -> process()): that parks the exchange twice (in the lambda and in
  // process()'s frame) plus a run_result, across three frames. A parked exchange's memory is
  // what a deep backlog costs (rc-bench delay0, inflight).
  route_.spawn_run(std::move(ex));
}

}  // namespace rc
