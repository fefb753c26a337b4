// timer({...}): a tick every `interval` after an initial `delay`, `count` times (0 = until the
// route stops). Each tick's run is awaited before the next is scheduled: with fixed_rate false the
// next tick comes `interval` after the run ends; with fixed_rate true ticks stay on the grid
// delay + k * interval (a tick whose slot has passed fires at once).
//
// exact_time "HH:MM:SS" makes it a daily timer instead: a tick at that wall time each day, in
// `timezone` (UTC by default, "local" or an IANA name; DST as for rc::cron, see
// docs/schedules.md); interval, delay and fixed_rate are then not used. `jitter` delays each tick
// by a further uniform random [0, jitter), drawn per tick (the grid itself does not drift).
//
// Headers: routecraft.timer.counter (1-based), periodMs (interval; 86400000 for exact_time),
// time (the tick's scheduled wall instant, ISO-8601 UTC), firedTime (the wall clock when it
// fired: later by the jitter and any lateness), nextRun (the next tick's scheduled instant; null
// on the last tick; without fixed_rate the earliest one, interval after this tick fired, since
// the run's length is not known yet).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

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
  std::string exact_time;             // "HH:MM:SS": daily at this wall time; empty = interval ticks
  std::string timezone = "UTC";       // of exact_time: IANA name, "UTC" or "local"
  duration jitter{};                  // each tick waits a further uniform random [0, jitter)
  std::optional<std::uint64_t> seed;  // seeds the jitter's generator (tests); random when unset

  void validate() const {
    if (interval <= duration::zero()) invalid_option("timer", "interval", "a duration > 0", ms_text(interval));
    if (delay < duration::zero()) invalid_option("timer", "delay", "a duration >= 0", ms_text(delay));
    if (jitter < duration::zero()) invalid_option("timer", "jitter", "a duration >= 0", ms_text(jitter));
  }
};

class cron_schedule;

class timer_source final : public source<tick> {
 public:
  explicit timer_source(timer_options o);
  std::string_view adapter() const override { return "timer"; }
  bool finite() const noexcept override { return o_.count > 0; }
  task<void> run(source_context& sc) override;

 private:
  timer_options o_;
  std::shared_ptr<const cron_schedule> daily_;  // exact_time as a schedule
};

inline timer_source timer(timer_options o = {}) { return timer_source(std::move(o)); }

}  // namespace rc
