// keyed_gate: what a gate with per-key state (throttle, slow_down, rate_limit) can tell about it, for tests
// and metrics. Reach it with `dynamic_cast<const rc::keyed_gate*>(step)`.
#pragma once

#include <cstddef>
#include <string_view>

#include "rc/metrics.hpp"

namespace rc {

struct keyed_gate_stats {
  std::size_t keys = 0;            // keys in the table
  std::size_t memory_bytes = 0;    // heap bytes of the table, counters included, plus overflow_bytes
  std::size_t overflow_bytes = 0;  // the overflow sketch's counters, once a key overflowed (else 0)
};

class keyed_gate {
 public:
  virtual ~keyed_gate() = default;
  virtual keyed_gate_stats stats() const = 0;
  /// What a rate gate (throttle, slow_down, rate_limit) decided so far: passed, delayed,
  /// rejected, waits. Read at any time; null for a gate that keeps none (concurrency).
  virtual const gate_counters* counters() const noexcept { return nullptr; }
  /// The gate's `label` option (may be empty).
  virtual std::string_view gate_label() const noexcept { return {}; }
};

}  // namespace rc
