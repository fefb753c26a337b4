// gate_decision: what a limiter answers for one arrival of one key, and what it sees of that
// arrival (gate_arrival). Shared by the limiters (gates/limiters.hpp) and the gate step
// (gate_step.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "rc/time.hpp"

namespace rc {

/// A limiter's answer for one arrival.
struct gate_decision {
  enum class kind : std::uint8_t { admit, wait, queue, refuse };
  kind what = kind::admit;
  duration wait{};               // wait: how long; queue: expected wait; refuse: retry after
  const char* reason = nullptr;  // refuse: why, for the message (a limiter may leave it empty)

  static gate_decision admit() noexcept { return {}; }
  static gate_decision wait_for(duration d) noexcept { return {kind::wait, d}; }
  static gate_decision queued(duration expected) noexcept { return {kind::queue, expected}; }
  static gate_decision refuse(duration retry_after, const char* why = nullptr) noexcept {
    return {kind::refuse, retry_after, why};
  }
  bool admitted() const noexcept { return what == kind::admit; }
  bool refused() const noexcept { return what == kind::refuse; }
};

/// What decide() sees besides the key's state.
struct gate_arrival {
  time_point now;
  std::uint32_t queued = 0;  // exchanges of this key in the FIFO queue
  std::size_t waiting = 0;   // exchanges in the queues of the whole gate
  /// False: the caller has no queue place yet. A limiter that would queue answers `queued`
  /// without taking anything, and is asked again with a place. Admissions and refusals are taken
  /// either way.
  bool can_queue = true;
  std::optional<time_point> deadline;  // the exchange's, when it has one
};

}  // namespace rc
