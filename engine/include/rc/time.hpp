// Engine time: one monotonic time line shared by the real and the manual clock.
//
// time 0 is the moment the clock was created (a context's start-up for the steady clock, the
// start of a test for the manual clock), so doubles derived from it keep nanosecond precision
// for months. Nothing here reads a clock: see clock.hpp for the seam.
#pragma once

#include <chrono>
#include <cstdint>

namespace rc {

/// Tag type for rc::time_point: the engine's own epoch, not the system's.
struct engine_epoch {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<engine_epoch, duration>;
  static constexpr bool is_steady = true;
};

using duration = std::chrono::nanoseconds;
using time_point = engine_epoch::time_point;
/// A wall-clock (calendar) instant in UTC, on the system clock's epoch (1970-01-01T00:00:00Z).
/// Only calendar schedules (cron, a timer's exact_time) and timestamps need it; the scheduler maps
/// it to and from engine time (scheduler::to_wall / from_wall in clock.hpp).
using wall_time = std::chrono::sys_time<std::chrono::nanoseconds>;

/// Milliseconds as a double, the unit every event payload uses (fractional values allowed).
constexpr double to_ms(duration d) noexcept { return static_cast<double>(d.count()) / 1e6; }
constexpr double to_ms(time_point t) noexcept { return to_ms(t.time_since_epoch()); }

/// The longest wait the reference's timers accept (2^31 - 1 ms); waits are capped at it.
inline constexpr duration max_timer_wait = std::chrono::milliseconds(2147483647);

}  // namespace rc
