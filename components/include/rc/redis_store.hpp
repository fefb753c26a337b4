// rc::redis_store: the decision_store (rc/gates/decision_store.hpp) of throttle, slow_down and
// rate_limit on Redis, so that several instances share one limit:
//
//   rc::redis_connection conn(ctx, {.host = "10.0.0.5"});
//   auto shared = rc::redis_store(conn, {.prefix = "api", .timeout = 50ms, .on_error = rc::store_on_error::local});
//   rc::craft().from(...).rate_limit({.limit = 100, .window = 1min, .key = rc::by_client(), .store = shared})
//
// Decisions are made by one Lua script, run atomically by the server on the server's clock (TIME),
// sent as EVALSHA and, when the server answers NOSCRIPT (a restart, SCRIPT FLUSH), once more as EVAL.
//   throttle  GCRA: the key holds the theoretical arrival time (µs). Reject mode admits when the
//             bucket has a token, else refuses with the exact retry-after. Delay mode reserves the
//             next place and answers the wait; reservations of all instances are handed out in
//             one order, and their admission times never exceed burst + rate * t in any window.
//   fixed     INCR and PEXPIRE: express's window, opened by the key's first hit.
//   sliding   the hits of the last `window`, in 10 buckets of window / 10 (a ring of 11 in one
//             string per key): a hit counts until its bucket has wholly left the window, so the
//             count is never below the true count of (now - window, now], and exceeds it by at
//             most the hits of the window / 10 just before that.
// Keys are hash-tagged, `{prefix:key}` plus a suffix per algorithm (":tb", ":fw", ":sr"). Gates
// that name the same prefix and key share their state: give each limit its own prefix. Keys
// expire on the server once idle.
//
// Batching (`batch`): decisions asked while the store already has calls in flight are queued and
// sent together, as one script call that decides them in the order they were asked, on one read
// of the server's clock (as if they had arrived at the same instant), each with its own answer.
// A call holding several keys spans several Redis Cluster slots, which a cluster (CROSSSLOT) and
// cluster proxies refuse, so `automatic` asks the server once (INFO cluster) and batches only
// when it is not a cluster (or when the probe cannot tell: a server that refuses INFO is taken
// for a proxy, and not batched); a batch the server refuses as cross-slot turns batching off and
// its decisions are sent again one by one.
//
// `timeout` bounds every decision from the moment it is asked (a batch's call is given what is
// left of its oldest decision's timeout); a decision that fails, or a server that is down, is
// handled by the gate as `on_error` says (see the seam's header), decision by decision. The
// connection must outlive the gates using the store.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "rc/gates/decision_store.hpp"
#include "rc/redis.hpp"

namespace rc {

enum class redis_batching : std::uint8_t {
  automatic,  // batch unless the server says it is a cluster member (or refuses to say)
  on,         // always batch (a single server, or keys known to share a slot)
  off,        // one script call per decision
};

struct redis_store_options {
  std::string prefix = "rc";
  duration timeout = std::chrono::milliseconds(50);
  store_on_error on_error = store_on_error::fail_open;
  redis_batching batch = redis_batching::automatic;
  /// The most decisions one script call carries.
  std::size_t max_batch = 128;
};

std::shared_ptr<decision_store> redis_store(redis_connection& conn, redis_store_options options = {});

}  // namespace rc
