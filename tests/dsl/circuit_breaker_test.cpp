// circuit_breaker through the DSL, both scopes, in virtual time.
#include <atomic>
#include <catch2/catch.hpp>
#include <map>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>

#include "support/dsl_support.hpp"
#include "support/traffic.hpp"

namespace circuit_breaker_test {

using namespace std::chrono_literals;
using rc::test::arrivals;
using rc::test::event_recorder;
using rc::test::rc_error;

namespace {

std::string error_code(const rc::test::recorded_event& e) { return e.details["error"]["code"].get<std::string>(); }

/// The codes of every route:exchange:failed, in order.
std::vector<std::string> failed_codes(const event_recorder& events) {
  std::vector<std::string> out;
  for (const auto& e : events.named("route:exchange:failed")) out.push_back(error_code(e));
  return out;
}

/// Fails (retryable, RC5001) for the bodies in `bad`, records every call.
struct downstream {
  std::vector<int> bad;
  std::vector<int>* calls;
  void operator()(int& v) const {
    calls->push_back(v);
    if (std::find(bad.begin(), bad.end(), v) != bad.end()) throw std::runtime_error("down");
  }
};

}  // namespace

TEST_CASE("circuit_breaker, step scope: threshold failures open it and later calls fail fast with RC5025") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  std::vector<int> calls;
  ctx.add(rc::craft()
              .id("r")
              .from(rc::sequence(std::vector<int>{0, 1, 2, 3}))
              .circuit_breaker({.failure_threshold = 2, .label = "inventory"})
              .to(downstream{{0, 1, 2, 3}, &calls})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(calls == std::vector<int>{0, 1});
  CHECK(failed_codes(events) == std::vector<std::string>{"RC5001", "RC5001", "RC5025", "RC5025"});
  const auto opened = events.named("route:circuitBreaker:opened");
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].details["failureCount"] == 2);
  CHECK(opened[0].details["threshold"] == 2);
  CHECK(opened[0].details["cooldownMs"] == 30000);
  CHECK(opened[0].details["label"] == "inventory");
  CHECK(opened[0].details["scope"] == "step");
  CHECK(opened[0].details["stepLabel"] == "to");
  const auto rejected = events.named("route:circuitBreaker:rejected");
  REQUIRE(rejected.size() == 2);
  CHECK(rejected[0].details["state"] == "open");
  CHECK(rejected[0].details["retryAfterMs"] == 30000);
  const auto failed = events.named("route:exchange:failed");
  CHECK(failed[2].details["error"]["retryable"] == false);
  CHECK(failed[2].details["error"]["details"]["retry_after_ms"] == 30000);
}

TEST_CASE("circuit_breaker: after the cooldown a successful probe closes it (halfOpen, closed)") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  std::vector<int> calls;
  // 0, 1 fail (open at 1ms); 2 is refused with 29999ms left; 3 at 31s probes and succeeds; 4 passes.
  ctx.add(rc::craft()
              .id("r")
              .from(arrivals({0ms, 1ms, 2ms, 31s, 32s}))
              .circuit_breaker({.failure_threshold = 2, .window = 10s, .cooldown = 30s})
              .to(downstream{{0, 1}, &calls}));
  ctx.start();
  ctx.drain();
  CHECK(calls == std::vector<int>{0, 1, 3, 4});
  CHECK(events.names("route:circuitBreaker:") ==
        std::vector<std::string>{"route:circuitBreaker:opened", "route:circuitBreaker:rejected",
                                 "route:circuitBreaker:halfOpen", "route:circuitBreaker:closed"});
  CHECK(events.named("route:circuitBreaker:rejected")[0].details["retryAfterMs"] == 29999);
  CHECK(events.count("route:exchange:completed") == 2);
}

TEST_CASE("circuit_breaker: a failed probe re-opens it with failureCount 1") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  std::vector<int> calls;
  ctx.add(rc::craft()
              .id("r")
              .from(arrivals({0ms, 1ms, 31s, 32s}))
              .circuit_breaker({.failure_threshold = 2})
              .to(downstream{{0, 1, 2, 3}, &calls}));
  ctx.start();
  ctx.drain();
  CHECK(calls == std::vector<int>{0, 1, 2});  // 3 is refused: re-opened at 31s
  const auto opened = events.named("route:circuitBreaker:opened");
  REQUIRE(opened.size() == 2);
  CHECK(opened[1].details["failureCount"] == 1);
  CHECK(events.count("route:circuitBreaker:halfOpen") == 1);
  CHECK(events.count("route:circuitBreaker:closed") == 0);
  CHECK(failed_codes(events).back() == "RC5025");
}

TEST_CASE("circuit_breaker: failures outside the sliding window do not add up") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  std::vector<int> calls;
  ctx.add(rc::craft()
              .id("r")
              .from(arrivals({0s, 11s, 22s}))
              .circuit_breaker({.failure_threshold = 2, .window = 10s})
              .to(downstream{{0, 1, 2}, &calls}));
  ctx.start();
  ctx.drain();
  CHECK(calls.size() == 3);
  CHECK(events.count("route:circuitBreaker:opened") == 0);
}

TEST_CASE("circuit_breaker: a fallback's body replaces a refused call and the pipeline goes on") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  std::vector<int> calls;
  ctx.add(rc::craft()
              .id("r")
              .from(rc::sequence(std::vector<int>{0, 1, 2}))
              .error([](const rc::error&, rc::exchange&) -> rc::recovery { return -1; })
              .circuit_breaker({.failure_threshold = 1,
                                .fallback = [](rc::exchange& ex) -> rc::recovery { return ex.body<int>() + 100; }})
              .to(downstream{{0}, &calls})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(calls == std::vector<int>{0});
  CHECK(out.bodies() == std::vector<int>{-1, 101, 102});
  CHECK(events.count("route:circuitBreaker:rejected") == 2);
}

TEST_CASE("circuit_breaker: a fallback may drop or rethrow (RC5025)") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  std::vector<int> calls;
  ctx.add(rc::craft()
              .id("drop")
              .from(rc::sequence(std::vector<int>{0, 1}))
              .circuit_breaker({.failure_threshold = 1,
                                .fallback = [](rc::exchange&) { return rc::recovery::drop("breaker-open"); }})
              .to(downstream{{0}, &calls}));
  ctx.add(
      rc::craft()
          .id("rethrow")
          .from(rc::sequence(std::vector<int>{0, 1}))
          .circuit_breaker({.failure_threshold = 1, .fallback = [](rc::exchange&) { return rc::recovery::rethrow(); }})
          .to(downstream{{0}, &calls}));
  ctx.start();
  ctx.drain();
  const auto dropped = events.named("route:exchange:dropped");
  REQUIRE(dropped.size() == 1);
  CHECK(dropped[0].details["reason"] == "breaker-open");
  std::map<std::string, std::vector<std::string>> codes;
  for (const auto& e : events.named("route:exchange:failed")) codes[e.details["routeId"]].push_back(error_code(e));
  CHECK(codes["rethrow"] == std::vector<std::string>{"RC5001", "RC5025"});
}

TEST_CASE("circuit_breaker: non-retryable errors do not count by default, is_failure decides otherwise") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  auto invalid = [](int&) { throw rc::error(rc::errc::validation, "bad input"); };
  ctx.add(rc::craft()
              .id("default")
              .from(rc::sequence(std::vector<int>{0, 1, 2}))
              .circuit_breaker({.failure_threshold = 1})
              .to(invalid));
  ctx.add(rc::craft()
              .id("custom")
              .from(rc::sequence(std::vector<int>{0, 1, 2}))
              .circuit_breaker({.failure_threshold = 1, .is_failure = [](const rc::error&) { return true; }})
              .to(invalid));
  ctx.add(rc::craft()
              .id("throwing")
              .from(rc::sequence(std::vector<int>{0, 1, 2}))
              .circuit_breaker({.failure_threshold = 1,
                                .is_failure = [](const rc::error&) -> bool { throw std::runtime_error("?"); }})
              .to(invalid));
  ctx.start();
  ctx.drain();
  std::map<std::string, int> opened;
  for (const auto& e : events.named("route:circuitBreaker:opened")) ++opened[e.details["routeId"]];
  CHECK(opened["default"] == 0);
  CHECK(opened["custom"] == 1);
  CHECK(opened["throwing"] == 1);
}

TEST_CASE("circuit_breaker: a dropped outcome is not a failure") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .from(rc::sequence(std::vector<int>{0, 1, 2}))
              .circuit_breaker({.failure_threshold = 1})
              .filter([](const int&) { return false; }));
  ctx.start();
  ctx.drain();
  CHECK(events.count("route:exchange:dropped") == 3);
  CHECK(events.count("route:circuitBreaker:opened") == 0);
}

TEST_CASE("circuit_breaker, keyed: one breaker per key, an open key does not refuse another") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  std::vector<int> calls;
  // Even bodies go to host "a" (down), odd ones to host "b" (up).
  ctx.add(rc::craft()
              .id("r")
              .from(rc::sequence(std::vector<int>{0, 2, 4, 1, 3}))
              .circuit_breaker({.failure_threshold = 2,
                                .key = [](const rc::exchange& ex) { return ex.body<int>() % 2 == 0 ? "a" : "b"; }})
              .to(downstream{{0, 2, 4}, &calls}));
  ctx.start();
  ctx.drain();
  CHECK(calls == std::vector<int>{0, 2, 1, 3});
  const auto opened = events.named("route:circuitBreaker:opened");
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].details["key"] == "a");
  const auto rejected = events.named("route:circuitBreaker:rejected");
  REQUIRE(rejected.size() == 1);
  CHECK(rejected[0].details["key"] == "a");
  CHECK(events.named("route:exchange:failed")[2].details["error"]["details"]["key"] == "a");
}

TEST_CASE("circuit_breaker, keyed: a full table never forgets an open breaker, new keys share the overflow breaker") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  std::vector<int> calls;
  // max_keys 1: key 0 opens and holds the only slot; keys 1 and 2 then share the overflow breaker,
  // which their two failures open; key 0 stays refused throughout.
  ctx.add(rc::craft()
              .id("r")
              .from(rc::sequence(std::vector<int>{0, 1, 2, 0, 3}))
              .circuit_breaker({.failure_threshold = 1,
                                .key = [](const rc::exchange& ex) { return std::to_string(ex.body<int>()); },
                                .max_keys = 1})
              .to(downstream{{0, 1, 2}, &calls}));
  ctx.start();
  ctx.drain();
  CHECK(calls == std::vector<int>{0, 1});  // 2 and 3 hit the overflow breaker opened by 1; 0 stays open
  CHECK(failed_codes(events) == std::vector<std::string>{"RC5001", "RC5001", "RC5025", "RC5025", "RC5025"});
}

TEST_CASE("circuit_breaker: a throwing key selector fails with RC5003") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .circuit_breaker({.failure_threshold = 1,
                                .key = [](const rc::exchange&) -> std::string { throw std::runtime_error("no host"); }})
              .to([](int&) {}));
  ctx.start();
  ctx.drain();
  CHECK(failed_codes(events) == std::vector<std::string>{"RC5003"});
}

// ---- route scope ------------------------------------------------------------------------------

TEST_CASE("circuit_breaker, route scope: opens on the pipeline's failures and refuses the whole run") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  std::vector<int> calls;
  ctx.add(rc::craft()
              .id("r")
              .circuit_breaker({.failure_threshold = 1})
              .from(rc::sequence(std::vector<int>{0, 1}))
              .to(downstream{{0}, &calls}));
  ctx.start();
  ctx.drain();
  CHECK(calls == std::vector<int>{0});
  CHECK(failed_codes(events) == std::vector<std::string>{"RC5001", "RC5025"});
  const auto opened = events.named("route:circuitBreaker:opened");
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].details["scope"] == "route");
  CHECK(opened[0].details["stepLabel"] == "route");
  CHECK(events.count("route:circuitBreaker:rejected") == 1);
}

TEST_CASE("circuit_breaker, route scope: the fallback's body completes the run") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  std::vector<int> calls;
  ctx.add(rc::craft()
              .id("r")
              .circuit_breaker({.failure_threshold = 1, .fallback = [](rc::exchange&) -> rc::recovery { return 77; }})
              .from(rc::sequence(std::vector<int>{0, 1}))
              .to(downstream{{0}, &calls})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.count() == 0);  // the fallback ends the run: the steps below the breaker do not run
  CHECK(calls == std::vector<int>{0});
}

TEST_CASE("circuit_breaker, route scope: a throttled exchange (RC5013) never counts as a breaker failure") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  std::vector<int> calls;
  ctx.add(rc::craft()
              .id("r")
              .circuit_breaker({.failure_threshold = 1})
              .throttle({.rate = 1, .mode = rc::throttle_mode::reject})
              .from(rc::simple(std::vector<int>{0, 1, 2, 3}))
              .to(downstream{{}, &calls}));
  ctx.start();
  ctx.drain();
  CHECK(calls == std::vector<int>{0});
  CHECK(failed_codes(events) == std::vector<std::string>{"RC5013", "RC5013", "RC5013"});
  CHECK(events.count("route:circuitBreaker:opened") == 0);
}

TEST_CASE("circuit_breaker, route scope: an exhausted retry counts once") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  std::vector<int> calls;
  ctx.add(rc::craft()
              .id("r")
              .retry({.max_attempts = 3, .backoff = 1ms})
              .circuit_breaker({.failure_threshold = 2})
              .from(rc::sequence(std::vector<int>{0, 1, 2}))
              .to(downstream{{0, 1, 2}, &calls}));
  ctx.start();
  ctx.drain();
  // Three attempts for 0 are one breaker failure; 1's three attempts are the second: open.
  CHECK(calls == std::vector<int>{0, 0, 0, 1, 1, 1});
  const auto opened = events.named("route:circuitBreaker:opened");
  REQUIRE(opened.size() == 1);
  CHECK(opened[0].details["failureCount"] == 2);
  CHECK(failed_codes(events) == std::vector<std::string>{"RC5001", "RC5001", "RC5025"});
}

// ---- options ------------------------------------------------------------------------------------

TEST_CASE("circuit_breaker: each bad option is RC5003 at the call, naming the option and the value") {
  auto at_route = [](rc::circuit_breaker_options o) { (void)rc::craft().circuit_breaker(std::move(o)); };
  auto at_step = [](rc::circuit_breaker_options o) {
    (void)rc::craft().from(rc::simple(1)).circuit_breaker(std::move(o));
  };
  for (auto call : {+at_route, +at_step}) {
    CHECK_THROWS_MATCHES(call({}), rc::error,
                         rc_error(rc::errc::misconfigured, "failure_threshold }) must be an integer >= 1, got 0"));
    CHECK_THROWS_MATCHES(call({.failure_threshold = 1, .window = 0ms}), rc::error,
                         rc_error(rc::errc::misconfigured, "window }) must be a duration >= 1ms, got 0ms"));
    CHECK_THROWS_MATCHES(call({.failure_threshold = 1, .cooldown = -5ms}), rc::error,
                         rc_error(rc::errc::misconfigured, "cooldown }) must be a duration >= 1ms, got -5ms"));
    CHECK_THROWS_MATCHES(call({.failure_threshold = 1, .half_open_max = 0}), rc::error,
                         rc_error(rc::errc::misconfigured, "half_open_max }) must be an integer >= 1, got 0"));
    CHECK_THROWS_MATCHES(call({.failure_threshold = 1, .max_keys = 0}), rc::error,
                         rc_error(rc::errc::misconfigured, "max_keys }) must be an integer in [1, 1000000], got 0"));
  }
}

TEST_CASE("circuit_breaker: a fallback body of another type than the step produces is RC5003") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .from(rc::sequence(std::vector<int>{0, 1}))
              .circuit_breaker({.failure_threshold = 1,
                                .fallback = [](rc::exchange&) -> rc::recovery { return std::string("cached"); }})
              .transform([](int v) -> int { throw std::runtime_error(std::to_string(v)); }));
  ctx.start();
  ctx.drain();
  CHECK(failed_codes(events) == std::vector<std::string>{"RC5001", "RC5003"});
}

TEST_CASE("circuit_breaker: several worker threads share one breaker consistently") {
  // Real time, 4 threads: every call fails; the breaker must open once and the rest be refused.
  rc::context ctx(rc::context_options{.threads = 4});
  event_recorder events(ctx);
  std::atomic<int> calls{0};
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(std::vector<int>(2000, 1)))
              .circuit_breaker({.failure_threshold = 50, .cooldown = std::chrono::hours(1)})
              .delay(0ms)
              .to([&](int&) {
                ++calls;
                throw std::runtime_error("down");
              }));
  ctx.start();
  ctx.drain();
  ctx.stop();
  CHECK(events.count("route:circuitBreaker:opened") == 1);
  CHECK(calls.load() >= 50);
  CHECK(events.count("route:exchange:failed") == 2000);
  CHECK(static_cast<int>(events.count("route:circuitBreaker:rejected")) == 2000 - calls.load());
}

// ---- the fast failure's error ---------------------------------------------------------------

TEST_CASE("an RC5025 fast failure names the breaker, its state and key, and reads in full after the context is gone") {
  struct variant {
    bool route_scope;
    std::string label;
    bool keyed;
    std::string message;
  };
  const auto v =
      GENERATE(variant{false, "inventory", false, "circuit breaker of inventory is open; retry after 30000ms"},
               variant{true, "", false, "circuit breaker of route \"r\" is open; retry after 30000ms"},
               variant{false, "", true, "circuit breaker of to is open for key \"a\"; retry after 30000ms"});
  CAPTURE(v.message);
  std::optional<rc::error> fast;
  {
    rc::context ctx(rc::virtual_time);
    rc::test::traffic_log log;
    rc::circuit_breaker_options o{.failure_threshold = 1, .label = v.label};
    if (v.keyed) o.key = rc::by_header("x-client");
    auto fail = [](int) { throw std::runtime_error("down"); };
    if (v.route_scope)
      ctx.add(rc::craft().id("r").circuit_breaker(o).from(rc::test::traffic(rc::test::burst(2), log)).to(fail));
    else
      ctx.add(rc::craft().id("r").from(rc::test::traffic(rc::test::burst(2), log)).circuit_breaker(o).to(fail));
    ctx.start();
    ctx.drain();
    ctx.stop();
    REQUIRE(log[2].failure);
    fast = *log[2].failure;  // a copy, taken before anything was read
  }
  CHECK(fast->code() == rc::errc::circuit_open);
  CHECK_FALSE(fast->retryable());
  CHECK(fast->message() == v.message);
  CHECK(std::string(fast->what()) == "RC5025: " + v.message);
  nlohmann::json details = {{"retry_after_ms", 30000.0}, {"state", "open"}};
  if (v.keyed) details["key"] = "a";
  CHECK(fast->details() == details);
}

}  // namespace circuit_breaker_test
