// rate_limit: a hard ceiling of `limit` hits per key per window (express-rate-limit's rule,
// reference §2). A hit is counted when the exchange reaches the gate; hits 1..limit pass, every
// later hit of the window is refused, and refused hits count too.
//
// A refusal fails the exchange at once with RC5013 (retryable), nothing downstream runs, and the
// error's details() carry the structured fields a transport needs: status, message, limit,
// remaining, used, reset / reset_ms, retry_after / retry_after_ms (whole seconds rounded up / exact
// ms), key, label and policy. Every counted exchange, passed or refused, gets a limit_note (gate
// "rateLimit") with the same numbers and the header mode `headers`; the HTTP source renders them
// byte for byte as express writes them (rc/http_rate_limit_headers.hpp: rate_limit_headers_of).
//
// Counting: `sliding` (default) counts the key's arrivals in (now - window, now], so no window of
// that length ever admits more than `limit`; `fixed` is express's window per key opened by its
// first hit, which can admit up to twice the limit across a window edge. reset is when the key's
// count next drops (the window end, for fixed); retry_after is when a new hit would pass (the same
// for fixed; for sliding, when enough hits have left the window).
//
// skip_failed / skip_successful give the hit back when the downstream outcome is a failure /
// success, inside the window it was counted in (never a later one). Route scope looks at the
// run's final outcome (a drop counts as a failure), step scope at the wrapped step's. Under
// skip_failed a refusal gives its own hit back at once (express: a 429 is a failed response).
//
// Per-key counters live in a bounded LRU of max_keys entries that forgets only keys with no hit
// left in their window; when every candidate still counts, the new key is counted in a count-min
// sketch rolled with the window (gates/count_min_sketch.hpp): its own estimate, which only
// over-counts, in memory fixed by max_keys (docs/slow_down_rate_limit.md, "Bounded memory").
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "rc/exchange.hpp"
#include "rc/gates/rate_limit_numbers.hpp"
#include "rc/keys.hpp"
#include "rc/options.hpp"
#include "rc/step.hpp"
#include "rc/wrappers/keyed_gate.hpp"

namespace rc {

class decision_store;  // rc/gates/decision_store.hpp

struct rate_limit_options {
  static constexpr std::size_t default_max_keys = 10000;
  static constexpr std::size_t max_keys_limit = 1000000;
  static constexpr std::string_view default_message = "Too many requests, please try again later.";
  static constexpr int default_status = 429;

  // Field order lets the common call read as the issue writes it:
  // {.limit, .window, .headers, .message, .key}.
  std::int64_t limit = 5;  // hits per window that pass; 0 refuses everything
  duration window = std::chrono::minutes(1);
  rate_limit_headers headers = rate_limit_headers::none;
  std::string message = std::string(default_message);  // the refusal's response body
  int status = default_status;                         // the refusal's response status
  key_selector key;                                    // one window per key; none = one shared window
  std::size_t max_keys = default_max_keys;
  std::string label;
  rc::counting counting = rc::counting::sliding;
  bool skip_failed = false;      // a failed downstream outcome gives the hit back
  bool skip_successful = false;  // a successful downstream outcome gives the hit back
  std::string policy;            // draft-8 quota name; empty = "<limit>-in-<window>" ("7-in-30sec")
  /// A shared store (rc::redis_store): the counts live there, shared by every instance; none =
  /// in memory (docs/redis.md).
  std::shared_ptr<decision_store> store;

  void validate() const;
};

/// Builds the rate_limit step around `inner` (null for a route-scope gate). Validates first.
std::unique_ptr<step> make_rate_limit(rate_limit_options options, std::unique_ptr<step> inner, scope s);

/// The builder's gate() extension point (found by ADL).
inline std::unique_ptr<step> make_gate(rate_limit_options options, std::unique_ptr<step> inner, scope s) {
  return make_rate_limit(std::move(options), std::move(inner), s);
}

}  // namespace rc
