#include "rc/wrappers/delay.hpp"

#include "rc/route.hpp"

namespace rc {

void delay_options::validate() const {
  if (delay < duration::zero()) invalid_option("delay", "delay", "a duration >= 0", ms_text(delay));
}

namespace {

class delay_step final : public wrapper {
 public:
  delay_step(delay_options o, std::unique_ptr<step> inner) : wrapper(std::move(inner), rc::scope::step), options_(o) {}

  std::string_view wrapper_kind() const noexcept override { return "delay"; }

  // The frame of this coroutine is what every exchange parked in a delay costs, so the event
  // payloads are built in plain member functions, outside it.
  task<outcome> run(exchange& ex, route_runtime& rt) override {
    const time_point start = rt.now();
    emit_started(ex, rt);
    bool cancelled = false;
    if (options_.delay == duration::zero()) {
      if (!rt.intake().fired()) co_await rt.clock().yield();
    } else {
      cancelled = co_await rt.clock().wait_until(start + options_.delay, &rt.intake()) == wait_result::cancelled;
    }
    emit_stopped(ex, rt, start, cancelled);
    if (inner_is_sync()) co_return run_inner_now(ex, rt);
    co_return co_await run_inner(ex, rt);
  }

 private:
  void emit_started(const exchange& ex, route_runtime& rt) const {
    rt.events().emit(event_id::delay_started, [&] {
      auto j = identity(ex, rt);
      j["delayMs"] = to_ms(options_.delay);
      return j;
    });
  }

  void emit_stopped(const exchange& ex, route_runtime& rt, time_point start, bool cancelled) const {
    rt.events().emit(event_id::delay_stopped, [&] {
      auto j = identity(ex, rt);
      j["delayMs"] = to_ms(options_.delay);
      j["elapsed"] = to_ms(rt.now() - start);
      j["cancelled"] = cancelled;
      return j;
    });
  }

  delay_options options_;
};

}  // namespace

std::unique_ptr<step> make_delay(delay_options options, std::unique_ptr<step> inner) {
  options.validate();
  return std::make_unique<delay_step>(options, std::move(inner));
}

}  // namespace rc
