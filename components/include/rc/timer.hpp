// timer({...}): a tick every `interval` after an initial `delay`, `count` times (0 = until the
// route stops). Each tick's run is awaited before the next is scheduled: with fixed_rate false the
// next tick comes `interval` after the run ends; with fixed_rate true ticks stay on the grid
// delay + k * interval (a tick whose slot has passed fires at once).
#pragma once

#include <cstdint>

#include "rc/endpoint.hpp"
#include "rc/options.hpp"

namespace rc {

struct tick {
  std::uint64_t counter = 0;  // 1-based
  time_point fired_at{};      // engine time
};

struct timer_options {
  duration interval = std::chrono::seconds(1);
  duration delay{};
  std::uint64_t count = 0;  // 0 = unbounded
  bool fixed_rate = false;

  void validate() const {
    if (interval <= duration::zero()) invalid_option("timer", "interval", "a duration > 0", ms_text(interval));
    if (delay < duration::zero()) invalid_option("timer", "delay", "a duration >= 0", ms_text(delay));
  }
};

class timer_source final : public source<tick> {
 public:
  explicit timer_source(timer_options o) : o_(o) { o_.validate(); }
  std::string_view adapter() const override { return "timer"; }
  bool finite() const noexcept override { return o_.count > 0; }
  task<void> run(source_context& sc) override {
    time_point next = sc.now() + o_.delay;
    for (std::uint64_t n = 1; o_.count == 0 || n <= o_.count; ++n) {
      if (co_await sc.sleep_until(next) == wait_result::cancelled) co_return;
      const time_point fired = sc.now();
      exchange ex = sc.make(tick{n, fired});
      ex.set_header("routecraft.timer.counter", n);
      ex.set_header("routecraft.timer.periodMs", to_ms(o_.interval));
      (void)co_await sc.emit(std::move(ex));
      next = o_.fixed_rate ? next + o_.interval : sc.now() + o_.interval;
    }
  }

 private:
  timer_options o_;
};

inline timer_source timer(timer_options o = {}) { return timer_source(o); }

}  // namespace rc
