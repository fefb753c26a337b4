// concurrency: a bulkhead. At most `max` exchanges run the next step (step scope) or the route's
// pipeline (route scope, the innermost resilience layer: a slot is held per attempt, never
// during a retry backoff) at once.
//
// queue mode (the default) makes the others wait in a FIFO queue, bounded by `max_queue` when
// given; reject mode fails them at once. A refusal is RC5026 (retryable) with reason `busy` (no
// slot free in reject mode, or the key table full) or `queue-full`. A slot is released however
// the run ends (completion, failure, drop, timeout, client disconnect, an abandoned run) and
// handed straight to the head of the queue. On shutdown (intake closed) the queue is admitted
// at once. A queued exchange whose abort signal fires leaves the queue: dropped ("client-gone"),
// or failed when an enclosing timeout's deadline passed (that timeout reports RC5011).
//
// With `key`, each key has its own `max` slots and queue. The table holds only keys with slots
// in use or waiters (an idle key is forgotten at once, so it never evicts a busy one); when
// `max_keys` keys are busy, a new key is refused (`busy`).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "rc/exchange.hpp"
#include "rc/options.hpp"
#include "rc/step.hpp"
#include "rc/wrappers/keyed_gate.hpp"

namespace rc {

enum class concurrency_mode { queue, reject };

struct concurrency_options {
  static constexpr std::size_t default_max_keys = 10000;
  static constexpr std::size_t max_keys_limit = 1000000;

  long long max = 0;  // required: >= 1 slots (per key when keyed)
  concurrency_mode mode = concurrency_mode::queue;
  std::optional<long long> max_queue;               // queue mode only: >= 1; default unbounded
  std::function<std::string(const exchange&)> key;  // one bulkhead per key; none = one shared
  std::size_t max_keys = default_max_keys;
  std::string label;

  /// RC5003 on the first invalid option.
  void validate() const;
};

/// What a concurrency wrapper holds right now. Reach it with
/// `dynamic_cast<const rc::concurrency_gate*>(step)`.
struct concurrency_stats {
  std::size_t in_use = 0;  // slots held, all keys
  std::size_t queued = 0;  // exchanges waiting, all keys
  std::size_t keys = 0;    // keys with slots in use or waiters
  std::size_t memory_bytes = 0;
};

class concurrency_gate : public keyed_gate {
 public:
  virtual concurrency_stats usage() const = 0;
};

std::unique_ptr<step> make_concurrency(concurrency_options options, std::unique_ptr<step> inner, scope s);

}  // namespace rc
