// The route-scope chain, through the DSL, in virtual time: whatever order the builder calls come
// in, the wrappers run as error( [gates..., cache( circuit_breaker( retry( timeout( concurrency(
// user steps )))))] ), and what that order means for an exchange.
#include <catch2/catch.hpp>
#include <memory>
#include <rc/rc.hpp>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"
#include "support/slow_work.hpp"

namespace chain_test {

using namespace std::chrono_literals;
using rc::test::arrivals;
using rc::test::event_recorder;
using rc::test::slow_work;
using rc::test::work_log;

namespace {

// Every wrapper event of one run, as "<event> <gateId>", in order.
std::vector<std::string> wrapper_trace(const event_recorder& events) {
  std::vector<std::string> out;
  for (const auto& e : events.all()) {
    if (!e.details.contains("gateId")) continue;
    out.push_back(e.name + " " + e.details["gateId"].get<std::string>());
  }
  return out;
}

}  // namespace

TEST_CASE("the route-scope chain runs in one fixed order whatever the builder order") {
  const std::vector<std::string> expected = {
      "route:throttle:passed throttle#1",  // gates first, admitted once
      "route:retry:started retry#1",       // the breaker (closed) says nothing
      "route:timeout:started timeout#1",   // a deadline per attempt, outside the bulkhead
      "route:concurrency:acquired concurrency#1",
      "route:concurrency:released concurrency#1",  // attempt 1 failed: the slot goes back
      "route:retry:attempt retry#1",               // before the backoff, with no slot held
      "route:timeout:started timeout#1",
      "route:concurrency:acquired concurrency#1",
      "route:concurrency:released concurrency#1",
      "route:timeout:stopped timeout#1",
      "route:retry:stopped retry#1",
  };
  auto run = [](bool declared_inside_out) {
    rc::context ctx(rc::virtual_time);
    auto work = std::make_shared<work_log>();
    event_recorder events(ctx);
    auto error = [](const rc::error&, rc::exchange&) { return rc::recovery::rethrow(); };
    if (declared_inside_out) {
      ctx.add(rc::craft()
                  .id("chain")
                  .concurrency({.max = 1})
                  .timeout(100ms)
                  .retry({.max_attempts = 2, .backoff = 10ms})
                  .circuit_breaker({.failure_threshold = 5})
                  .throttle({.rate = 10})
                  .error(error)
                  .from(arrivals({0ms}))
                  .to(slow_work(20ms, work, true, 1)));
    } else {
      ctx.add(rc::craft()
                  .id("chain")
                  .error(error)
                  .throttle({.rate = 10})
                  .circuit_breaker({.failure_threshold = 5})
                  .retry({.max_attempts = 2, .backoff = 10ms})
                  .timeout(100ms)
                  .concurrency({.max = 1})
                  .from(arrivals({0ms}))
                  .to(slow_work(20ms, work, true, 1)));
    }
    ctx.start();
    ctx.drain();
    CHECK(work->completed == 1);
    CHECK(events.count("route:exchange:completed") == 1);
    return wrapper_trace(events);
  };
  CHECK(run(false) == expected);
  CHECK(run(true) == expected);
}

TEST_CASE("a route-scope cache hit bypasses the breaker, retry, timeout and concurrency") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("cached")
              .circuit_breaker({.failure_threshold = 1})
              .retry({.max_attempts = 2})
              .timeout(100ms)
              .concurrency({.max = 1})
              .cache({.key = [](const rc::exchange&) { return std::string("one"); }})
              .from(arrivals({0ms, 1s}))
              .to(slow_work(20ms, work))
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(work->started.size() == 1);  // the second exchange never reached the downstream
  CHECK(out.count() == 1);           // nor the steps after it: the cached body is the route's result
  CHECK(events.count("route:exchange:completed") == 2);
  CHECK(events.count("route:cache:hit") == 1);
  CHECK(events.count("route:exchange:restored") == 1);
  // Each resilience wrapper ran for the first exchange only.
  CHECK(events.count("route:retry:started") == 1);
  CHECK(events.count("route:timeout:started") == 1);
  CHECK(events.count("route:concurrency:acquired") == 1);
}

TEST_CASE("the route error handler sees a gate refusal (RC5013) and a route timeout (RC5011)") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  rc::spy<int> out;
  std::vector<std::string> seen;
  ctx.add(rc::craft()
              .id("guarded")
              .error([&seen](const rc::error& e, rc::exchange&) {
                seen.push_back(e.code_string());
                return -1;
              })
              .throttle({.rate = 1, .mode = rc::throttle_mode::reject})
              .timeout(50ms)
              .from(arrivals({0ms, 10ms}))
              .to(slow_work(200ms, work))
              .to(out));
  ctx.start();
  ctx.drain();
  // The second exchange is refused at 10 ms; the first times out at 50 ms, its call cut short.
  CHECK(seen == std::vector<std::string>{"RC5013", "RC5011"});
  CHECK(work->cut_short == 1);
  CHECK(out.count() == 0);
}

}  // namespace chain_test
