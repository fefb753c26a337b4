// decision_store: the seam between a rate gate (throttle, slow_down, rate_limit) and a store that
// keeps its state outside the process, shared by every instance that names the same store keys.
//
// The engine knows only this interface; a store lives in components (rc::redis_store, rc/redis_store.hpp).
// A gate given `.store` asks it once per exchange, asynchronously, and applies the answer:
//   throttle   GCRA on the store's clock. Reject mode: admitted, or refused with retry_after.
//              Delay mode: a reservation; the answer's `wait` is how long this exchange waits
//              before it is admitted, so reservations of every instance are admitted in the order
//              the store handed them out.
//   windows    the key's hit count (this hit included), when it next drops (reset) and, given a
//              limit, when a new hit would be within it (retry_after). Counts may over-count (see
//              the store's documentation), never under-count.
// The decision is the store's: the gate keeps no state of its own for it (except the fallback
// limiter of store_on_error::local). A decision that fails (timeout, store gone, a bad reply)
// throws from decide(); the store bounds it by its own timeout, so no exchange waits on a store
// longer than that. The gate then applies on_error():
//   fail_open    the exchange passes, unmetered;
//   fail_closed  the exchange is refused (RC5013, details {store_failed: true});
//   local        an in-process limiter with the gate's own options decides (per instance: N
//                instances then admit up to N times the limit while the store is away).
// The gate emits route:store:failed when its decisions start failing and route:store:recovered
// when one succeeds again.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "rc/task.hpp"
#include "rc/time.hpp"

namespace rc {

enum class store_on_error : std::uint8_t { fail_open, fail_closed, local };

/// One decision, as a gate asks it.
struct store_query {
  enum class kind : std::uint8_t { throttle, fixed_window, sliding_window };
  kind what = kind::throttle;
  std::string_view key;  // the gate's key; empty for an unkeyed gate. Valid while decide() runs.

  // throttle (GCRA): admissions never exceed burst + t / interval in any window of length t.
  duration interval{};               // the emission interval: per / rate
  duration tolerance{};              // (burst - 1) * interval
  bool reserve = false;              // delay mode: take a place and say how long to wait
  std::optional<duration> max_wait;  // delay mode: refuse (reserving nothing) past this wait

  // windows (fixed: opened by the key's first hit; sliding: hits in (now - window, now])
  duration window{};
  std::uint64_t limit = 0;  // retry_after is computed against it; 0: no limit
};

struct store_answer {
  bool admitted = true;    // throttle only; windows always count the hit
  duration wait{};         // throttle: the reserved wait (admitted) or the retry-after (refused)
  std::uint64_t hits = 0;  // windows: this hit's number
  duration reset{};        // windows: until the key's count next drops
  duration retry_after{};  // windows: until a new hit's number would be <= limit
  /// The store-clock instant (µs) of the admission: throttle, now + wait; windows, the hit's time.
  /// Lets tests check the combined schedule of several instances. 0 when the store has no clock.
  std::int64_t admit_at_us = 0;
};

class decision_store {
 public:
  virtual ~decision_store() = default;
  /// One decision. Throws (rc::error) when the store cannot answer within its timeout.
  virtual task<store_answer> decide(const store_query& q) = 0;
  virtual store_on_error on_error() const noexcept = 0;
  /// For events and messages: "redis".
  virtual std::string_view name() const noexcept = 0;
};

}  // namespace rc
