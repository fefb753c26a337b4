// circuit_breaker: stops calling a failing downstream for a while (the next step in step scope,
// everything below it in the route's chain in route scope: retry, timeout, concurrency, cache
// and the user steps).
//
// States as in rc/gates/breaker.hpp: `failure_threshold` failures within the sliding `window`
// open it; it refuses calls for `cooldown`, then admits `half_open_max` probes; a probe success
// closes it, a probe failure opens it again. A refused call runs `fallback(ex)` if given (its
// recovery body becomes the body and the pipeline goes on; drop and rethrow work as for error
// handlers, forward does not), else fails with RC5025 (not retryable) whose details carry
// `retry_after_ms`, the time left in the cooldown.
//
// What counts as a failure: `is_failure(err)`, by default a retryable error (a validation error
// says nothing about the downstream's health); a throwing predicate counts as a failure. A drop is
// not a failure.
//
// Keyed: `key(ex)` gives one breaker per downstream (per host, say), in a table of at most
// `max_keys` breakers. The least recently used idle (closed, no failure in the window) breaker
// makes room for a new key; an open or half-open breaker is never forgotten (that would let
// traffic through to a downstream known to be down). When no entry can go, new keys share one
// overflow breaker until room appears.
//
// Events route:circuitBreaker:opened {failureCount, threshold, cooldownMs}, halfOpen, closed,
// rejected {state, retryAfterMs}, with the wrapper identity, label and key when set. Thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "rc/error.hpp"
#include "rc/options.hpp"
#include "rc/recovery.hpp"
#include "rc/step.hpp"

namespace rc {

struct circuit_breaker_options {
  int failure_threshold = 0;  // required, >= 1
  duration window = std::chrono::seconds(60);
  duration cooldown = std::chrono::seconds(30);
  int half_open_max = 1;
  /// Runs instead of a refused call; its result decides what happens (body, drop or rethrow).
  std::function<recovery(exchange&)> fallback;
  /// Does this failure count against the downstream? Default: retryable errors only.
  std::function<bool(const error&)> is_failure;
  std::string label;
  /// One breaker per key (e.g. the target host). Empty: one breaker for the wrapper.
  std::function<std::string(const exchange&)> key;
  std::size_t max_keys = 10000;

  static constexpr std::size_t max_keys_limit = 1'000'000;
  void validate() const;
};

/// `body_type`: the fallback's body is checked against it (see body_type_slot).
std::unique_ptr<step> make_circuit_breaker(circuit_breaker_options options, std::unique_ptr<step> inner, scope s,
                                           body_type_slot body_type = {});

}  // namespace rc
