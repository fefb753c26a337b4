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
  std::size_t parts = 1;           // the table's parts, each with its own lock (gate_step.hpp)
};

class keyed_gate {
 public:
  virtual ~keyed_gate() = default;
  virtual keyed_gate_stats stats() const = 0;
  /// Whether the gate counts its decisions: a rate gate (throttle, slow_down, rate_limit) does,
  /// concurrency does not.
  virtual bool has_counters() const noexcept { return false; }
  /// What a gate that counts decided so far: passed, delayed, rejected, waits. Read at any time
  /// (id, kind and label are the caller's to fill); all zero for a gate that does not count.
  virtual gate_snapshot read_counters() const { return {}; }
  /// The gate's `label` option (may be empty).
  virtual std::string_view gate_label() const noexcept { return {}; }
};

}  // namespace rc
