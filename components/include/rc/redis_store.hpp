// rc::redis_store: the decision_store (rc/gates/decision_store.hpp) of throttle, slow_down and
// rate_limit on Redis, so that several instances share one limit:
//
//   rc::redis_connection conn(ctx, {.host = "10.0.0.5"});
//   auto shared = rc::redis_store(conn, {.prefix = "api", .timeout = 50ms, .on_error = rc::store_on_error::local});
//   rc::craft().from(...).rate_limit({.limit = 100, .window = 1min, .key = rc::by_client(), .store = shared})
//
// Every decision is one Lua script, run atomically by the server on the server's clock (TIME), sent
// as EVALSHA and, when the server answers NOSCRIPT (a restart, SCRIPT FLUSH), once more as EVAL.
//   throttle  GCRA: the key holds the theoretical arrival time (µs). Reject mode admits when the
//             bucket has a token, else refuses with the exact retry-after. Delay mode reserves the
//             next place and answers the wait; reservations of all instances are handed out in
//             one order, and their admission times never exceed burst + rate * t in any window.
//   fixed     INCR and PEXPIRE in one script: express's window, opened by the key's first hit.
//   sliding   the hits of the last `window`, in 10 buckets of window / 10 (a hash per key, at
//             most 11 fields): a hit counts until its bucket has wholly left the window, so the
//             count is never below the true count of (now - window, now], and exceeds it by at
//             most the hits of the window / 10 just before that.
// Keys are hash-tagged, `{prefix:key}` plus a suffix per algorithm (":tb", ":fw", ":sw"), so one
// key's script touches one Redis Cluster slot. Gates that name the same prefix and key share
// their state: give each limit its own prefix. Keys expire on the server once idle.
//
// `timeout` bounds every decision (the connection's command timeout for it); a decision that
// fails, or a server that is down, is handled by the gate as `on_error` says (see the seam's
// header). The connection must outlive the gates using the store.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "rc/gates/decision_store.hpp"
#include "rc/redis.hpp"

namespace rc {

struct redis_store_options {
  std::string prefix = "rc";
  duration timeout = std::chrono::milliseconds(50);
  store_on_error on_error = store_on_error::fail_open;
};

std::shared_ptr<decision_store> redis_store(redis_connection& conn, redis_store_options options = {});

}  // namespace rc
