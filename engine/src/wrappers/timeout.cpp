#include "rc/wrappers/timeout.hpp"

#include "rc/clock.hpp"
#include "rc/route.hpp"

namespace rc {

void timeout_options::validate() const {
  if (after < std::chrono::milliseconds(1)) invalid_option("timeout", "after", "a duration >= 1ms", ms_text(after));
}

namespace {

class timeout_step final : public wrapper {
 public:
  timeout_step(timeout_options o, std::unique_ptr<step> inner, rc::scope s)
      : wrapper(std::move(inner), s), options_(std::move(o)) {}

  std::string_view wrapper_kind() const noexcept override { return "timeout"; }

  // A synchronous step cannot be interrupted anyway: measured, not raced, and no frame at all.
  bool synchronous() const noexcept override { return inner_ && inner_->synchronous(); }

  // Unless its events carry an elapsed time, it is timed with the coarse clock (two precise reads
  // were most of this wrapper's cost): it then counts as late only once it overran by more than
  // the clock's tick, so work done in time is never failed.
  outcome run_now(exchange& ex, route_runtime& rt) override {
    auto& bus = rt.events();
    const bool precise = bus.listening(event_id::timeout_stopped) || bus.listening(event_id::timeout_expired);
    scheduler& clock = rt.clock();
    const time_point start = precise ? clock.now() : clock.coarse_now();
    emit_started(ex, rt);
    outcome o = run_inner_now(ex, rt);
    const duration elapsed = (precise ? clock.now() : clock.coarse_now()) - start;
    const duration slack = precise ? duration::zero() : clock.coarse_resolution();
    const bool late = slack == duration::zero() ? elapsed >= options_.after : elapsed > options_.after + slack;
    return settle(ex, rt, std::move(o), start, late, false);
  }

  task<outcome> run(exchange& ex, route_runtime& rt) override {
    const time_point start = rt.now();
    emit_started(ex, rt);
    cancel_signal* const outer = ex.abort_signal();
    outcome o;
    bool expired = false;
    {
      // The work inside sees the deadline's signal as the exchange's abort signal.
      deadline_scope deadline(rt.clock(), outer, start + options_.after);
      ex.set_abort_signal(&deadline.signal());
      o = co_await run_inner(ex, rt);
      ex.set_abort_signal(outer);
      expired = deadline.disarm();
    }
    co_return settle(ex, rt, std::move(o), start, expired, outer != nullptr && outer->deadline_passed());
  }

 private:
  outcome settle(exchange& ex, route_runtime& rt, outcome o, time_point start, bool expired, bool outer_expired) {
    if (expired) {
      emit_end(event_id::timeout_expired, ex, rt, start);
      return outcome::failed(std::make_exception_ptr(timed_out(rt)));
    }
    // An enclosing deadline cut the work short: that wrapper reports it.
    if (outer_expired) return o;
    // A failure within the deadline passes through with only `started` emitted.
    if (!o.is_fail()) emit_end(event_id::timeout_stopped, ex, rt, start);
    return o;
  }

  error timed_out(const route_runtime& rt) const {
    const std::string ms = fmt::format("{}", to_ms(options_.after));
    std::string msg = scope_ == rc::scope::route
                          ? fmt::format("Route \"{}\" pipeline exceeded its {}ms timeout", rt.id(), ms)
                          : fmt::format("Step \"{}\" exceeded its {}ms timeout",
                                        options_.label.empty() ? std::string(label()) : options_.label, ms);
    nlohmann::json details = {{"timeoutMs", to_ms(options_.after)}, {"scope", to_string(scope_)}};
    if (!options_.label.empty()) details["label"] = options_.label;
    return error(errc::timed_out, std::move(msg), true, nullptr, std::move(details));
  }

  void emit_started(const exchange& ex, route_runtime& rt) const {
    rt.events().emit(event_id::timeout_started, [&] {
      auto j = identity(ex, rt, options_.label);
      j["timeoutMs"] = to_ms(options_.after);
      return j;
    });
  }

  void emit_end(event_id id, const exchange& ex, route_runtime& rt, time_point start) const {
    rt.events().emit(id, [&] {
      auto j = identity(ex, rt, options_.label);
      j["timeoutMs"] = to_ms(options_.after);
      j["elapsed"] = to_ms(rt.now() - start);
      return j;
    });
  }

  timeout_options options_;
};

}  // namespace

std::unique_ptr<step> make_timeout(timeout_options options, std::unique_ptr<step> inner, scope s) {
  options.validate();
  return std::make_unique<timeout_step>(std::move(options), std::move(inner), s);
}

}  // namespace rc
