// Throttle through the DSL (reference §5, §14 throttle scenarios, issue 2 item 6), in virtual
// time: every arrival and admission time is asserted exactly.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>

#include "support/deferred_details.hpp"
#include "support/dsl_support.hpp"
#include "support/traffic.hpp"

namespace throttle_test {

using namespace std::chrono_literals;
using rc::test::burst;
using rc::test::event_recorder;
using rc::test::in_ms;
using rc::test::rc_error;
using rc::test::traffic;
using rc::test::traffic_log;

namespace {

std::vector<int> range(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

std::string error_code(const rc::test::recorded_event& e) { return e.details["error"]["code"].get<std::string>(); }

}  // namespace

// ---- pacing -------------------------------------------------------------------------------

TEST_CASE("throttle at rate 5 delivers 7 simultaneous exchanges: five at once, then one every 200 ms") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("t").from(rc::simple(range(7))).throttle({.rate = 5}).to(out));
  ctx.start();
  ctx.drain();
  CHECK(in_ms(out.times()) == std::vector<double>{0, 0, 0, 0, 0, 200, 400});
  CHECK(out.bodies() == range(7));
  CHECK(events.count("route:exchange:dropped") == 0);
  CHECK(events.count("route:exchange:failed") == 0);
}

TEST_CASE(
    "throttle at rate 5 with 6 simultaneous exchanges: 6 passed (5 unwaited, 1 waited) and 1 delayed, scope step") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("t").from(rc::simple(range(6))).throttle({.rate = 5}).to(out));
  ctx.start();
  ctx.drain();
  const auto passed = events.named("route:throttle:passed");
  const auto delayed = events.named("route:throttle:delayed");
  REQUIRE(passed.size() == 6);
  REQUIRE(delayed.size() == 1);
  int unwaited = 0;
  for (const auto& p : passed) {
    CHECK(p.details["scope"] == "step");
    if (!p.details["waited"].get<bool>()) ++unwaited;
  }
  CHECK(unwaited == 5);
  CHECK(delayed[0].details["scope"] == "step");
  CHECK(delayed[0].details["waitMs"].get<double>() > 0);
  CHECK(delayed[0].details["waitMs"].get<double>() == 200.0);
}

TEST_CASE("simultaneous arrivals are admitted in arrival order, each at its exact slot") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft().id("fifo").from(rc::simple(range(6))).throttle({.rate = 4, .burst = 2}).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == range(6));
  CHECK(in_ms(out.times()) == std::vector<double>{0, 0, 250, 500, 750, 1000});
}

TEST_CASE("an exchange arriving during a backlog queues behind it and waits for the next free slot") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx, "route:throttle:delayed");
  ctx.add(rc::craft()
              .id("fifo")
              .from(rc::test::arrivals({0ms, 0ms, 0ms, 100ms}))
              .throttle({.rate = 2, .burst = 1})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == range(4));
  CHECK(in_ms(out.times()) == std::vector<double>{0, 500, 1000, 1500});
  const auto delayed = events.all();
  REQUIRE(delayed.size() == 3);
  CHECK(delayed[2].details["waitMs"].get<double>() == 1400.0);
}

TEST_CASE("a fractional slot interval never admits early: waits round up to the next nanosecond") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft().id("thirds").from(rc::simple(range(4))).throttle({.rate = 3, .burst = 1}).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.times() == std::vector<rc::duration>{0ns, 333333334ns, 666666667ns, 1000000000ns});
}

// ---- the queue: callers that go away ----------------------------------------------------------

namespace {

/// Runs `script` through a throttle at 10/s burst 1 (slots 0, 100, 200, ... ms); the requests
/// numbered in `leaving` (1-based) hang up at 50 ms. Returns when each request was served, in
/// seconds (-1: never), and checks that the leavers were dropped as client-gone.
std::vector<double> hang_ups_at_50ms(std::vector<rc::test::request> script, std::vector<int> leaving) {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  traffic_log log;
  rc::cancel_signal hang_up(ctx.clock());
  for (const int id : leaving) script.at(static_cast<std::size_t>(id - 1)).abort = &hang_up;
  ctx.add(rc::craft().id("q").from(traffic(script, log)).throttle({.rate = 10, .burst = 1}).to(out));
  ctx.start();
  ctx.advance(50ms);
  hang_up.fire();
  ctx.drain();
  for (const int id : leaving) CHECK(log[id].drop_reason == "client-gone");
  return rc::test::served_seconds(out, script.size());
}

}  // namespace

TEST_CASE("a caller leaving from the middle of the queue moves everyone behind it up one slot") {
  // Request 3 holds the 200 ms slot. Requests 4 and 5 move up to 200 and 300 ms; request 6
  // (arrived at 150 ms) lines up behind them at 400 ms instead of sharing a slot with request 5.
  CHECK(hang_ups_at_50ms(burst(5) + burst(1, 150ms), {3}) == std::vector<double>{0, 0.1, -1, 0.2, 0.3, 0.4});
}

TEST_CASE("when the first in the queue leaves, the next one takes its slot") {
  CHECK(hang_ups_at_50ms(burst(4), {2}) == std::vector<double>{0, -1, 0.1, 0.2});
}

TEST_CASE("when every waiter leaves, the next caller gets the first free slot") {
  CHECK(hang_ups_at_50ms(burst(4) + burst(1, 150ms), {2, 3, 4}) == std::vector<double>{0, -1, -1, -1, 0.15});
}

// ---- late timers: the process stalls while exchanges wait ------------------------------------
// ctx.stall(d) moves virtual time on without running anything, as a descheduled process or a VM
// stall does in real time: the waits that fell due meanwhile all wake late, at once.

TEST_CASE("after a stall the queue moves later by the whole intervals lost instead of bursting, in order") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft().id("stall").from(rc::simple(range(10))).throttle({.rate = 1000, .burst = 1}).to(out));
  ctx.start();
  ctx.advance(1ms);
  CHECK(in_ms(out.times()) == std::vector<double>{0, 1});
  ctx.stall(4300us);  // tickets 2, 3, 4 and 5 ms fall due while nothing runs
  ctx.drain();
  // Exchange 2 goes at once, 3.3 ms behind its ticket: three intervals are lost, and the rest
  // keep one interval apart from its (moved) 5 ms ticket, instead of 3, 4 and 5 going with it.
  CHECK(out.bodies() == range(10));
  CHECK(in_ms(out.times()) == std::vector<double>{0, 1, 5.3, 6, 7, 8, 9, 10, 11, 12});
}

TEST_CASE("passed_at in a passed event is the throttle's clock at each pass, after a stall too") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  std::vector<double> passed_ms;
  std::vector<double> elapsed_ms;
  std::vector<bool> waited;
  const rc::time_point t0 = ctx.now();
  auto sub = ctx.on("route:throttle:passed", [&](const rc::event& e) {
    const auto* g = e.get<rc::gate_event>();
    REQUIRE(g != nullptr);
    passed_ms.push_back(std::chrono::duration<double, std::milli>(g->passed_at - t0).count());
    elapsed_ms.push_back(std::chrono::duration<double, std::milli>(g->elapsed).count());
    waited.push_back(g->waited);
  });
  ctx.add(rc::craft().id("at").from(rc::simple(range(4))).throttle({.rate = 1000, .burst = 1}).to(out));
  ctx.start();
  ctx.advance(1ms);
  ctx.stall(4300us);
  ctx.drain();
  // 0 at once, 1 on its ticket, 2 woken late at 5.3 ms (the schedule moves), 3 one interval on.
  CHECK(passed_ms == std::vector<double>{0, 1, 5.3, 6});
  CHECK(elapsed_ms == passed_ms);  // all four arrived at 0
  CHECK(waited == std::vector<bool>{false, true, true, true});
  CHECK(in_ms(out.times()) == passed_ms);
}

TEST_CASE("an exchange arriving while the queue is overdue lines up behind it, not ahead of it") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(
      rc::craft().id("stall").from(rc::test::arrivals({0ms, 0ms, 500us})).throttle({.rate = 1000, .burst = 1}).to(out));
  ctx.start();
  ctx.advance(0ms);  // exchange 0 passes, exchange 1 waits for ticket 1 ms
  ctx.stall(5ms);    // exchange 2 arrives with ticket 1 ms long due but exchange 1 not yet run
  ctx.drain();
  CHECK(out.bodies() == range(3));
  CHECK(in_ms(out.times()) == std::vector<double>{0, 5, 6});
}

TEST_CASE("stopping during a stall admits every overdue exchange") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft().id("stall").from(rc::simple(range(6))).throttle({.rate = 1000, .burst = 1}).to(out));
  ctx.start();
  ctx.advance(0ms);  // all six arrive; five wait for tickets 1 .. 5 ms
  ctx.stall(3500us);
  ctx.stop();
  CHECK(out.bodies() == range(6));
}

TEST_CASE("random stalls never let more than burst + m through in any window of m intervals") {
  // rate 1000/s, burst 3: 600 arrivals over 300 ms, virtual time moved on in random steps with a
  // random stall one step in four. Every window [t, t + m ms] of admissions holds <= 3 + m.
  constexpr int n = 600;
  constexpr std::size_t capacity = 3;  // the throttle's burst
  const unsigned seed = GENERATE(1u, 2u, 3u, 4u, 5u, 6u, 7u, 20261130u);
  INFO("seed " << seed);
  std::mt19937 random(seed);
  std::vector<rc::duration> offsets;
  for (int i = 0; i < n; ++i) offsets.push_back(rc::duration(random() % 300'000'000));
  std::sort(offsets.begin(), offsets.end());
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("stalls")
              .from(rc::test::arrivals(offsets))
              .throttle({.rate = 1000, .burst = static_cast<double>(capacity)})
              .to(out));
  ctx.start();
  for (int step = 0; step < 2000; ++step) {
    ctx.advance(rc::duration(random() % 1'500'000));
    if (random() % 4 == 0) ctx.stall(rc::duration(random() % 6'000'000));
  }
  ctx.drain();
  REQUIRE(out.bodies() == range(n));  // all delivered, in arrival order
  const auto times = out.times();
  for (const int m : {0, 1, 2, 5, 10, 100}) {
    std::size_t most = 0;
    for (std::size_t i = 0, j = 0; i < times.size(); ++i) {
      while (j < times.size() && times[j] - times[i] <= rc::duration(std::chrono::milliseconds(m))) ++j;
      most = std::max(most, j - i);
    }
    INFO("window of " << m << " ms");
    CHECK(most <= capacity + static_cast<std::size_t>(m));
  }
}

TEST_CASE("a keyed throttle at rate 2 paces users a and b on separate buckets") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("keyed")
              .from(rc::simple(std::vector<std::string>{"a1", "b1", "a2", "b2", "a3", "b3"}))
              .throttle({.rate = 2, .key = [](const rc::exchange& ex) { return ex.body<std::string>().substr(0, 1); }})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.count() == 6);
  CHECK(out.bodies() == std::vector<std::string>{"a1", "b1", "a2", "b2", "a3", "b3"});
  CHECK(in_ms(out.times()) == std::vector<double>{0, 0, 0, 0, 500, 500});
  const auto delayed = events.named("route:throttle:delayed");
  REQUIRE(delayed.size() == 2);
  CHECK(delayed[0].details["key"] == "a");
  CHECK(delayed[1].details["key"] == "b");
  const auto passed = events.named("route:throttle:passed");
  REQUIRE(passed.size() == 6);
  for (const auto& p : passed) CHECK(p.details.contains("key"));
}

TEST_CASE("burst 1 at rate 2 delays the second of two simultaneous exchanges by 500 ms") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx, "route:throttle:delayed");
  ctx.add(rc::craft().id("b1").from(rc::simple(range(2))).throttle({.rate = 2, .burst = 1}).to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(events.count("route:throttle:delayed") == 1);
  CHECK(events.all()[0].details["waitMs"].get<double>() == 500.0);
  CHECK(in_ms(out.times()) == std::vector<double>{0, 500});
}

TEST_CASE("burst 0.5 still admits a single exchange at once (capacity never below 1)") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx, "route:throttle:delayed");
  ctx.add(rc::craft().id("half").from(rc::simple(0)).throttle({.rate = 2, .burst = 0.5}).to(out));
  ctx.start();
  ctx.drain();
  CHECK(events.count("route:throttle:delayed") == 0);
  CHECK(in_ms(out.times()) == std::vector<double>{0});
}

TEST_CASE("rate 600 per minute admits 3 simultaneous exchanges at once") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx, "route:throttle:delayed");
  ctx.add(rc::craft().id("pm").from(rc::simple(range(3))).throttle({.rate = 600, .per = rc::per::minute}).to(out));
  ctx.start();
  ctx.drain();
  CHECK(in_ms(out.times()) == std::vector<double>{0, 0, 0});
  CHECK(events.count("route:throttle:delayed") == 0);
}

TEST_CASE("per hour and per day spread the rate over the whole window") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> hourly, daily;
  ctx.add(rc::craft()
              .id("h")
              .from(rc::simple(range(2)))
              .throttle({.rate = 2, .per = rc::per::hour, .burst = 1})
              .to(hourly));
  ctx.add(
      rc::craft().id("d").from(rc::simple(range(2))).throttle({.rate = 4, .per = rc::per::day, .burst = 1}).to(daily));
  ctx.start();
  ctx.drain();
  CHECK(hourly.times() == std::vector<rc::duration>{0ns, 30min});
  CHECK(daily.times() == std::vector<rc::duration>{0ns, 6h});
}

TEST_CASE("stopping the context while the second exchange paces at 1 per minute delivers both") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx, "route:throttle:passed");
  ctx.add(rc::craft().id("slow").from(rc::simple(range(2))).throttle({.rate = 1, .per = rc::per::minute}).to(out));
  ctx.start();
  ctx.advance(10s);
  REQUIRE(out.count() == 1);
  const auto result = ctx.stop();
  CHECK_FALSE(result.forced);
  CHECK(in_ms(out.times()) == std::vector<double>{0, 10000});
  const auto passed = events.all();
  REQUIRE(passed.size() == 2);
  CHECK(passed[1].details["waited"] == true);
  CHECK(passed[1].details["elapsed"].get<double>() == 10000.0);
}

// ---- route scope --------------------------------------------------------------------------

TEST_CASE("stacked route-scope throttles at rate 5 and rate 100 pace 7 exchanges at the slower rate") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("stacked").throttle({.rate = 5}).throttle({.rate = 100}).from(rc::simple(range(7))).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.count() == 7);
  CHECK(in_ms(out.times()) == std::vector<double>{0, 0, 0, 0, 0, 200, 400});
  CHECK(events.count("route:throttle:passed") == 14);  // every exchange passes both gates
}

TEST_CASE("a route-scope throttle at rate 5 emits 6 passed with scope route and stepLabel route") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx, "route:throttle:passed");
  ctx.add(rc::craft().id("r").throttle({.rate = 5}).from(rc::simple(range(6))).to(out));
  ctx.start();
  ctx.drain();
  const auto passed = events.all();
  REQUIRE(passed.size() == 6);
  for (const auto& p : passed) {
    CHECK(p.details["scope"] == "route");
    CHECK(p.details["stepLabel"] == "route");
  }
  CHECK(out.count() == 6);
}

// ---- reject mode --------------------------------------------------------------------------

TEST_CASE("reject mode at rate 1 in step scope delivers 1 of 3 and fails 2 with RC5013") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("rej")
              .from(rc::simple(range(3)))
              .throttle({.rate = 1, .mode = rc::throttle_mode::reject})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{0});
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 2);
  for (const auto& f : failed) CHECK(error_code(f) == "RC5013");
  const auto rejected = events.named("route:throttle:rejected");
  REQUIRE(rejected.size() == 2);
  for (const auto& r : rejected) {
    CHECK(r.details["retryAfterMs"].get<double>() > 0);
    CHECK(r.details["scope"] == "step");
  }
}

TEST_CASE("reject mode at rate 1 in route scope delivers 1 of 3 and fails 2 with RC5013") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("rej")
              .throttle({.rate = 1, .mode = rc::throttle_mode::reject})
              .from(rc::simple(range(3)))
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{0});
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 2);
  for (const auto& f : failed) CHECK(error_code(f) == "RC5013");
  const auto rejected = events.named("route:throttle:rejected");
  REQUIRE(rejected.size() == 2);
  for (const auto& r : rejected) {
    CHECK(r.details["retryAfterMs"].get<double>() > 0);
    CHECK(r.details["scope"] == "route");
    CHECK(r.details["stepLabel"] == "route");
  }
}

TEST_CASE("reject mode takes no token when it refuses: the next token is ready one interval after the first") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("rej")
              .from(rc::test::arrivals({0ms, 0ms, 0ms, 1000ms}))
              .throttle({.rate = 1, .mode = rc::throttle_mode::reject})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{0, 3});
  CHECK(in_ms(out.times()) == std::vector<double>{0, 1000});
}

TEST_CASE("an RC5013 refusal carries retry_after_ms in its details and the same value in the rejected event") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("rej")
              .from(rc::simple(range(2)))
              .throttle({.rate = 1, .mode = rc::throttle_mode::reject})
              .to(out));
  ctx.start();
  ctx.drain();
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 1);
  const auto& err = failed[0].details["error"];
  CHECK(err["code"] == "RC5013");
  CHECK(err["retryable"] == true);
  CHECK(err["details"]["retry_after_ms"].get<double>() == 1000.0);
  CHECK(err["message"].get<std::string>().find("Retry after ~1000ms") != std::string::npos);
  const auto rejected = events.named("route:throttle:rejected");
  REQUIRE(rejected.size() == 1);
  CHECK(rejected[0].details["retryAfterMs"].get<double>() == 1000.0);
}

TEST_CASE("a throttle refusal's message and details are built on first read, exactly, and outlive the context") {
  std::optional<rc::error> refused;
  {
    rc::context ctx(rc::virtual_time);
    rc::spy<int> out;
    traffic_log log;
    ctx.add(
        rc::craft()
            .id("rej")
            .from(traffic(burst(2), log))
            .throttle(
                {.rate = 1, .mode = rc::throttle_mode::reject, .key = rc::by_header("x-client"), .label = "per-client"})
            .to(out));
    ctx.start();
    ctx.drain();
    ctx.stop();
    REQUIRE(log[2].refused());
    refused = *log[2].failure;  // a copy, taken before anything was read
  }
  // The context, its route and the gate are gone; the error still reads in full.
  const rc::error& err = *refused;
  CHECK(err.code() == rc::errc::rate_limited);
  CHECK(err.retryable());
  const rc::error copy_before = err;
  const std::string message = "throttle rejected the exchange: rate limit exceeded for key \"a\". Retry after ~1000ms.";
  CHECK(err.message() == message);
  CHECK(std::string(err.what()) == "RC5013: " + message);
  CHECK(err.details() ==
        nlohmann::json{{"gate", "throttle"}, {"retry_after_ms", 1000.0}, {"key", "a"}, {"label", "per-client"}});
  rc::test::check_details_read_unbuilt(copy_before, err.details());
  CHECK(copy_before.message() == message);
  CHECK(copy_before.details() == err.details());
}

TEST_CASE("a refused arrival is decided once: one rejected event, one rejected count, answered at arrival") {
  // The step that finishes a pass at once (its inner step is synchronous) finishes a refusal at
  // once too, instead of deciding it a second time on its asynchronous path.
  const bool keyed = GENERATE(false, true);
  CAPTURE(keyed);
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  traffic_log log;
  event_recorder events(ctx);
  rc::throttle_options o{.rate = 2, .mode = rc::throttle_mode::reject};
  if (keyed) o.key = rc::by_header("x-client");
  ctx.add(rc::craft().id("once").from(traffic(burst(5) + burst(3, 1s), log)).throttle(std::move(o)).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{1, 2, 6, 7});
  for (int id : {3, 4, 5, 8}) {
    CAPTURE(id);
    REQUIRE(log[id].refused());
    CHECK(log[id].answered == log[id].arrived);
  }
  CHECK(events.count("route:throttle:rejected") == 4);
  CHECK(events.count("route:throttle:passed") == 4);
  const auto snapshot = ctx.snapshot();
  REQUIRE(snapshot.routes.size() == 1);
  REQUIRE(snapshot.routes[0].gates.size() == 1);
  CHECK(snapshot.routes[0].gates[0].rejected == 4);
  CHECK(snapshot.routes[0].gates[0].passed == 4);
}

// ---- backlog bounds (beyond the reference) -------------------------------------------------

TEST_CASE("max_wait refuses with RC5013 an exchange whose wait would exceed it, and takes no token") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  // Slots at 0, 1000, 2000 ms. #2 would wait 2000 ms > 1500: refused. #3 arrives at 500 ms and
  // gets the 2000 ms slot (a 1500 ms wait, allowed) only because #2 took nothing.
  ctx.add(rc::craft()
              .id("mw")
              .from(rc::test::arrivals({0ms, 0ms, 0ms, 500ms}))
              .throttle({.rate = 1, .burst = 1, .max_wait = 1500ms})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{0, 1, 3});
  CHECK(in_ms(out.times()) == std::vector<double>{0, 1000, 2000});
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 1);
  CHECK(error_code(failed[0]) == "RC5013");
  CHECK(failed[0].details["error"]["message"].get<std::string>().find("max_wait") != std::string::npos);
  CHECK(events.count("route:throttle:rejected") == 1);
}

TEST_CASE("max_queue refuses with RC5013 once that many exchanges wait, and takes no token") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  // #0 passes at once; #1 and #2 wait (queue full); #3 and #4 are refused. At 1500 ms one waits,
  // so #5 queues for the 3000 ms slot, right after #2's.
  ctx.add(rc::craft()
              .id("mq")
              .from(rc::test::arrivals({0ms, 0ms, 0ms, 0ms, 0ms, 1500ms}))
              .throttle({.rate = 1, .burst = 1, .max_queue = 2})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{0, 1, 2, 5});
  CHECK(in_ms(out.times()) == std::vector<double>{0, 1000, 2000, 3000});
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 2);
  for (const auto& f : failed) {
    CHECK(error_code(f) == "RC5013");
    CHECK(f.details["error"]["message"].get<std::string>().find("max_queue") != std::string::npos);
  }
}

// ---- retry interplay ------------------------------------------------------------------------

TEST_CASE("a route-scope throttle outside a route-scope retry takes one token for two attempts") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx, "route:throttle:passed");
  int calls = 0;
  ctx.add(rc::craft()
              .id("rt")
              .throttle({.rate = 5})
              .retry({.max_attempts = 2, .backoff = 0ms})
              .from(rc::simple(1))
              .to([&](int&) {
                if (++calls == 1) throw std::runtime_error("first attempt fails");
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(calls == 2);
  CHECK(out.count() == 1);
  CHECK(events.count("route:throttle:passed") == 1);
}

TEST_CASE("a step retry declared before a step throttle re-enters the throttle on each attempt") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx, "route:throttle:passed");
  int calls = 0;
  ctx.add(rc::craft()
              .id("st")
              .from(rc::simple(1))
              .retry({.max_attempts = 2, .backoff = 0ms})
              .throttle({.rate = 5})
              .to([&](int&) {
                if (++calls == 1) throw std::runtime_error("first attempt fails");
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(calls == 2);
  CHECK(out.count() == 1);
  CHECK(events.count("route:throttle:passed") == 2);
}

// ---- key selector, labels and event fields ---------------------------------------------------

// Three exchanges (bodies 0, 1, 2) through a keyed throttle whose selector throws `thrown` for the
// second: what reached the end, and the route:exchange:failed events.
template <class Thrown>
std::pair<std::vector<int>, std::vector<rc::test::recorded_event>> run_throwing_selector(Thrown thrown) {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("k")
              .from(rc::simple(range(3)))
              .throttle({.rate = 10,
                         .key = [thrown](const rc::exchange& ex) -> std::string {
                           if (ex.body<int>() == 1) throw thrown;
                           return "tenant-" + std::to_string(ex.body<int>());
                         }})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(events.count("route:throttle:passed") == 2);
  return {out.bodies(), events.named("route:exchange:failed")};
}

TEST_CASE(
    "a throwing key selector fails only that exchange, with RC5001 (retryable) naming key, and an rc::error it "
    "throws passes unchanged") {
  {
    const auto [passed, failed] = run_throwing_selector(std::runtime_error("no tenant header"));
    CHECK(passed == std::vector<int>{0, 2});
    REQUIRE(failed.size() == 1);
    CHECK(error_code(failed[0]) == "RC5001");
    CHECK(failed[0].details["error"]["retryable"] == true);
    const auto message = failed[0].details["error"]["message"].get<std::string>();
    CHECK(message.find("throttle({ key })") != std::string::npos);
    CHECK(message.find("no tenant header") != std::string::npos);
  }
  {
    const auto [passed, failed] = run_throwing_selector(rc::error(rc::errc::validation, "tenant malformed", false));
    CHECK(passed == std::vector<int>{0, 2});
    REQUIRE(failed.size() == 1);
    CHECK(error_code(failed[0]) == "RC5002");
    CHECK(failed[0].details["error"]["retryable"] == false);
    CHECK(failed[0].details["error"]["message"] == "tenant malformed");
  }
}

TEST_CASE("the label shows on passed events") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx, "route:throttle:passed");
  ctx.add(rc::craft().id("l").from(rc::simple(1)).throttle({.rate = 5, .label = "per-tenant"}).to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(events.count("route:throttle:passed") == 1);
  CHECK(events.all()[0].details["label"] == "per-tenant");
}

TEST_CASE("passed and delayed events carry every field: identity, scope, label, key, waited, elapsed, waitMs") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("fields")
              .from(rc::simple(range(2)))
              .header("tenant", "acme")
              .throttle({.rate = 1,
                         .key = [](const rc::exchange& ex) { return ex.header_or("tenant", "anonymous"); },
                         .label = "per-tenant"})
              .to(out));
  ctx.start();
  ctx.drain();
  const auto received = out.received();
  REQUIRE(received.size() == 2);
  const auto passed = events.named("route:throttle:passed");
  const auto delayed = events.named("route:throttle:delayed");
  REQUIRE(passed.size() == 2);
  REQUIRE(delayed.size() == 1);
  for (const auto* e : {&passed[0], &passed[1], &delayed[0]}) {
    const auto& d = e->details;
    CHECK(d["routeId"] == "fields");
    CHECK(d["exchangeId"].is_string());
    CHECK(d["correlationId"].is_string());
    CHECK(d["stepLabel"] == "to");
    CHECK(d["scope"] == "step");
    CHECK(d["label"] == "per-tenant");
    CHECK(d["key"] == "acme");
  }
  CHECK(passed[0].details["exchangeId"] == received[0].exchange_id);
  CHECK(passed[0].details["correlationId"] == received[0].exchange_id);  // no incoming correlation id
  CHECK(passed[0].details["waited"] == false);
  CHECK(passed[0].details["elapsed"].get<double>() == 0.0);
  CHECK(delayed[0].details["exchangeId"] == received[1].exchange_id);
  CHECK(delayed[0].details["waitMs"].get<double>() == 1000.0);
  CHECK(passed[1].details["exchangeId"] == received[1].exchange_id);
  CHECK(passed[1].details["waited"] == true);
  CHECK(passed[1].details["elapsed"].get<double>() == 1000.0);
}

TEST_CASE("rejected events carry every field: identity, scope, label, key and retryAfterMs") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx, "route:throttle:rejected");
  ctx.add(rc::craft()
              .id("fields")
              .from(rc::simple(range(2)))
              .throttle({.rate = 2,
                         .mode = rc::throttle_mode::reject,
                         .burst = 1,
                         .key = [](const rc::exchange&) { return std::string("k1"); },
                         .label = "guard"})
              .to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(events.count("route:throttle:rejected") == 1);
  const auto d = events.all()[0].details;
  CHECK(d["routeId"] == "fields");
  CHECK(d["exchangeId"].is_string());
  CHECK(d["correlationId"].is_string());
  CHECK(d["stepLabel"] == "to");
  CHECK(d["scope"] == "step");
  CHECK(d["label"] == "guard");
  CHECK(d["key"] == "k1");
  CHECK(d["retryAfterMs"].get<double>() == 500.0);
}

// ---- keyed table bounds -----------------------------------------------------------------------

TEST_CASE("delay mode: keys that find the table full wait, paced, in one overflow bucket, none is refused") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  event_recorder events(ctx);
  // a and b each hold a bucket that is not full again until 1 s later; c, d and e find no
  // evictable entry and share the overflow bucket (same rate and burst): c goes at once, d and e
  // wait one interval apart, in arrival order.
  ctx.add(rc::craft()
              .id("full")
              .from(rc::test::arrivals_source<std::string>(
                  {{0ms, "a"}, {0ms, "b"}, {0ms, "c"}, {0ms, "d"}, {0ms, "e"}, {500ms, "c"}}))
              .throttle({.rate = 1,
                         .burst = 1,
                         .key = [](const rc::exchange& ex) { return ex.body<std::string>(); },
                         .max_keys = 2,
                         .label = "per-key"})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<std::string>{"a", "b", "c", "d", "e", "c"});
  // The second c arrives while d and e still wait in the overflow: it joins them, behind them.
  CHECK(in_ms(out.times()) == std::vector<double>{0, 0, 0, 1000, 2000, 3000});
  CHECK(events.count("route:throttle:rejected") == 0);
  CHECK(events.count("route:exchange:failed") == 0);
  const auto overflowed = events.named("route:throttle:overflow");
  REQUIRE(overflowed.size() == 4);  // once per exchange sent to the overflow
  CHECK(overflowed[0].details["key"] == "c");
  CHECK(overflowed[0].details["maxKeys"] == 2);
  CHECK(overflowed[0].details["routeId"] == "full");
  CHECK(overflowed[0].details["gateId"].is_string());
  CHECK(overflowed[0].details["label"] == "per-key");
  CHECK(overflowed[3].details["key"] == "c");
  const auto delayed = events.named("route:throttle:delayed");
  REQUIRE(delayed.size() == 3);
  CHECK(delayed[0].details["key"] == "d");
  CHECK(delayed[0].details["overflow"] == true);
  CHECK(delayed[0].details["waitMs"].get<double>() == 1000.0);
}

TEST_CASE("delay mode: once the overflow has drained, a freed table entry takes the next new key") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  event_recorder events(ctx, "route:throttle:overflow");
  ctx.add(rc::craft()
              .id("full")
              .from(rc::test::arrivals_source<std::string>({{0ms, "a"}, {0ms, "b"}, {0ms, "c"}, {1000ms, "c"}}))
              .throttle({.rate = 1,
                         .burst = 1,
                         .key = [](const rc::exchange& ex) { return ex.body<std::string>(); },
                         .max_keys = 2})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(in_ms(out.times()) == std::vector<double>{0, 0, 0, 1000});
  CHECK(events.count("route:throttle:overflow") == 1);  // at 1 s a's bucket is full again: c takes it
}

TEST_CASE("reject mode: a full key table refuses a new key with RC5013 rather than admitting it unmetered") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("full")
              .from(rc::test::arrivals_source<std::string>({{0ms, "a"}, {0ms, "b"}, {0ms, "c"}, {1000ms, "c"}}))
              .throttle({.rate = 1,
                         .mode = rc::throttle_mode::reject,
                         .burst = 1,
                         .key = [](const rc::exchange& ex) { return ex.body<std::string>(); },
                         .max_keys = 2})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<std::string>{"a", "b", "c"});
  CHECK(in_ms(out.times()) == std::vector<double>{0, 0, 1000});
  CHECK(events.count("route:throttle:overflow") == 0);
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 1);
  CHECK(error_code(failed[0]) == "RC5013");
  CHECK(failed[0].details["error"]["message"].get<std::string>().find("key table full") != std::string::npos);
}

TEST_CASE("2,000,000 distinct keys through max_keys 10,000 are all admitted and memory stays bounded") {
  rc::context ctx(rc::virtual_time);
  event_recorder refusals(ctx, "route:throttle:rejected");
  std::uint64_t delivered = 0;
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr std::uint64_t keys = 200'000;  // still 20x max_keys; 2,000,000 takes minutes here
#else
  constexpr std::uint64_t keys = 2'000'000;
#endif
  // One new key every microsecond; a bucket is full again 1 ms after its one token, so the least
  // recently used entry (10 ms old) is always evictable.
  ctx.add(rc::craft()
              .id("keys")
              .from(rc::test::paced_counter(keys, 1us))
              .throttle({.rate = 1000,
                         .burst = 1,
                         .key = [](const rc::exchange& ex) { return std::to_string(ex.body<std::uint64_t>()); },
                         .max_keys = 10'000})
              .to([&](std::uint64_t&) { ++delivered; }));
  ctx.start();
  ctx.advance(100ms);  // 100,000 keys: the table is full and evicting
  REQUIRE(delivered >= 100'000);
  const std::size_t warm_kib = rc::test::resident_kib();
  ctx.drain();
  const std::size_t end_kib = rc::test::resident_kib();
  CHECK(delivered == keys);
  CHECK(refusals.count("route:throttle:rejected") == 0);
#if defined(__SANITIZE_ADDRESS__)
  (void)warm_kib;
  (void)end_kib;  // ASan's quarantine holds freed memory: RSS says nothing here
#else
  // Growing with the keys would cost well over 100 MB for 1,900,000 more of them.
  INFO("RSS after 100k keys: " << warm_kib << " KiB, after 2M: " << end_kib << " KiB");
  CHECK(end_kib < warm_kib + 16 * 1024);
#endif
}

// ---- validation (RC5003 at build time) ---------------------------------------------------------

TEST_CASE("throttle rejects a missing, zero, negative or non-finite rate with RC5003 naming rate") {
  CHECK_THROWS_MATCHES((rc::craft().throttle({})), rc::error, rc_error(rc::errc::misconfigured, "throttle({ rate })"));
  CHECK_THROWS_MATCHES((rc::craft().throttle({.rate = 0})), rc::error, rc_error(rc::errc::misconfigured, "got 0"));
  CHECK_THROWS_MATCHES((rc::craft().throttle({.rate = -1})), rc::error, rc_error(rc::errc::misconfigured, "rate"));
  CHECK_THROWS_MATCHES((rc::craft().throttle({.rate = std::nan("")})), rc::error,
                       rc_error(rc::errc::misconfigured, "rate"));
  CHECK_THROWS_MATCHES((rc::craft().throttle({.rate = std::numeric_limits<double>::infinity()})), rc::error,
                       rc_error(rc::errc::misconfigured, "rate"));
}

TEST_CASE("throttle rejects burst 0, a negative or a non-finite burst with RC5003 naming burst") {
  CHECK_THROWS_MATCHES((rc::craft().throttle({.rate = 5, .burst = 0})), rc::error,
                       rc_error(rc::errc::misconfigured, "throttle({ burst })"));
  CHECK_THROWS_MATCHES((rc::craft().throttle({.rate = 5, .burst = -2})), rc::error,
                       rc_error(rc::errc::misconfigured, "burst"));
  CHECK_THROWS_MATCHES((rc::craft().throttle({.rate = 5, .burst = std::nan("")})), rc::error,
                       rc_error(rc::errc::misconfigured, "burst"));
}

TEST_CASE("throttle rejects max_keys 0 and 1e8 with RC5003 naming max_keys") {
  CHECK_THROWS_MATCHES((rc::craft().throttle({.rate = 5, .max_keys = 0})), rc::error,
                       rc_error(rc::errc::misconfigured, "throttle({ max_keys })"));
  CHECK_THROWS_MATCHES((rc::craft().throttle({.rate = 5, .max_keys = 100'000'000})), rc::error,
                       rc_error(rc::errc::misconfigured, "got 100000000"));
  CHECK_THROWS_MATCHES((rc::craft().throttle({.rate = 5, .max_keys = 1'000'001})), rc::error,
                       rc_error(rc::errc::misconfigured, "max_keys"));
}

TEST_CASE("throttle rejects a per or mode outside its enumeration with RC5003 naming it") {
  CHECK_THROWS_MATCHES((rc::craft().throttle({.rate = 5, .per = static_cast<rc::per>(42)})), rc::error,
                       rc_error(rc::errc::misconfigured, "throttle({ per })"));
  CHECK_THROWS_MATCHES((rc::craft().throttle({.rate = 5, .mode = static_cast<rc::throttle_mode>(42)})), rc::error,
                       rc_error(rc::errc::misconfigured, "throttle({ mode })"));
}

TEST_CASE("throttle rejects a negative max_wait, and max_wait or max_queue in reject mode, with RC5003") {
  CHECK_THROWS_MATCHES((rc::craft().throttle({.rate = 5, .max_wait = -1ms})), rc::error,
                       rc_error(rc::errc::misconfigured, "throttle({ max_wait })"));
  CHECK_THROWS_MATCHES((rc::craft().throttle({.rate = 5, .mode = rc::throttle_mode::reject, .max_wait = 1s})),
                       rc::error, rc_error(rc::errc::misconfigured, "max_wait"));
  CHECK_THROWS_MATCHES((rc::craft().throttle({.rate = 5, .mode = rc::throttle_mode::reject, .max_queue = 3})),
                       rc::error, rc_error(rc::errc::misconfigured, "max_queue"));
}

TEST_CASE("throttle options are validated at the wrapper call in step scope too") {
  auto b = rc::craft().id("v").from(rc::simple(1));
  CHECK_THROWS_MATCHES(std::move(b).throttle({.rate = 0}), rc::error, rc_error(rc::errc::misconfigured, "rate"));
}

TEST_CASE("throttle accepts the boundaries: max_keys 1 and 1,000,000, a fractional rate and burst") {
  CHECK_NOTHROW(rc::craft().throttle({.rate = 5, .max_keys = 1}));
  CHECK_NOTHROW(rc::craft().throttle({.rate = 5, .max_keys = 1'000'000}));
  CHECK_NOTHROW(rc::craft().throttle({.rate = 0.001, .burst = 0.5}));
}

}  // namespace throttle_test
