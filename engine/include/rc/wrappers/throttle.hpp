// throttle: a token bucket in front of the next step (step scope) or the whole route (route
// scope, admitted once, outside retry).
//
// delay mode queues an exchange that cannot go at once, strictly FIFO, and admits the queue one
// interval apart; reject mode fails fast with RC5013 and takes no token. `max_wait` and
// `max_queue` bound the delay backlog: an exchange whose wait would exceed either is rejected
// with RC5013 instead of queuing. On shutdown (intake closed) a waiting exchange is admitted at
// once; its token is not returned. When the exchange's abort signal fires (the client went
// away) it leaves the queue and is dropped ("client-gone"); its slot goes back and everyone
// behind it moves up one. If the process stalls (a VM pause, a descheduled thread) the queue is
// admitted late, but never in a burst: the schedule moves later by the whole intervals lost,
// so no window of whole intervals ever holds more than burst + rate * t.
//
// Per-key buckets live in a bounded LRU. A bucket is forgotten only when it is idle (full again,
// nobody waiting), so forgetting never admits more than the rate. When max_keys buckets are all
// busy, delay mode sends a new key to one shared overflow bucket (same rate and burst, its own
// FIFO queue; event route:throttle:overflow), so it is paced, never dropped; reject mode refuses
// it with RC5013 rather than admitting it unmetered.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "rc/exchange.hpp"
#include "rc/options.hpp"
#include "rc/step.hpp"

namespace rc {

class decision_store;  // rc/gates/decision_store.hpp

enum class throttle_mode { delay, reject };

struct throttle_options {
  static constexpr std::size_t default_max_keys = 10000;
  static constexpr std::size_t max_keys_limit = 1000000;

  double rate = 0;  // required: tokens per `per`
  rc::per per = rc::per::second;
  throttle_mode mode = throttle_mode::delay;
  std::optional<double> burst;                      // bucket capacity; default = rate, floor 1
  std::function<std::string(const exchange&)> key;  // one bucket per key; none = one shared bucket
  std::size_t max_keys = default_max_keys;
  std::string label;
  std::optional<duration> max_wait;      // delay mode: refuse instead of waiting longer
  std::optional<std::size_t> max_queue;  // delay mode: refuse when this many already wait
  /// A shared store (rc::redis_store): the bucket lives there, shared by every instance; none =
  /// in memory. max_queue then counts this instance's waiters (docs/redis.md).
  std::shared_ptr<decision_store> store;

  /// RC5003 on the first invalid option, in the reference's order.
  void validate() const;
};

/// Builds the throttle step around `inner` (null for a route-scope gate). Validates first.
std::unique_ptr<step> make_throttle(throttle_options options, std::unique_ptr<step> inner, scope s);

}  // namespace rc
