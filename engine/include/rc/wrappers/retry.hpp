// retry: re-runs the next step (step scope) or the route's user pipeline (route scope) after a
// failure, with exponential backoff, optional jitter, and a predicate.
//
// Attempt n waits base * (1 - jitter * U[0,1)) where base = min(backoff * factor^(n-1),
// max_backoff) (0 when backoff is 0). A failure carrying `retry_after_ms` in its details (an
// HTTP 429/503 Retry-After, a throttle refusal) waits at least that long. The final error
// propagates unchanged. Backoff waits end early on shutdown, and the last error surfaces.
#pragma once

#include <functional>
#include <memory>

#include "rc/error.hpp"
#include "rc/options.hpp"
#include "rc/step.hpp"

namespace rc {

namespace jitter {
inline constexpr double none = 0.0;
inline constexpr double full = 1.0;
}  // namespace jitter

struct retry_options {
  int max_attempts = 3;  // total, including the first
  duration backoff = std::chrono::milliseconds(1000);
  double factor = 1;
  duration max_backoff = max_timer_wait;
  double jitter = rc::jitter::none;  // 0 = none, 1 = full, or a fraction in between
  /// Retry this failure? Default: everything except rc::errors marked non-retryable.
  std::function<bool(const error&)> retry_on;
  /// Draws in [0, 1) for the jitter; default: a per-thread engine seeded at random. A seeded
  /// source makes jittered runs reproducible (rc-sim).
  std::function<double()> random;

  void validate() const;
};

std::unique_ptr<step> make_retry(retry_options options, std::unique_ptr<step> inner, scope s);

}  // namespace rc
