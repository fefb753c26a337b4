// timeout through the DSL, in virtual time: deadlines, events, RC5011, cancellation of the work
// inside (throttle, delay, retry backoff, a listening call), nesting and stacking, both scopes.
#include <catch2/catch.hpp>
#include <memory>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/dsl_support.hpp"
#include "support/slow_work.hpp"
#include "support/traffic.hpp"

namespace timeout_test {

using namespace std::chrono_literals;
using rc::test::burst;
using rc::test::event_recorder;
using rc::test::in_ms;
using rc::test::rc_error;
using rc::test::slow_work;
using rc::test::traffic;
using rc::test::traffic_log;
using rc::test::work_log;

namespace {

double ms_of(const nlohmann::json& v) { return v.get<double>(); }

}  // namespace

// ---- in time, late, failures ----------------------------------------------------------------

TEST_CASE("work that settles in time emits timeout:started and timeout:stopped, never expired") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("t").from(traffic(burst(1), log)).timeout(100ms).to(slow_work(60ms, work)));
  ctx.start();
  ctx.drain();
  CHECK(log[1].passed());
  CHECK(log[1].answered == 60ms);
  CHECK(events.names("route:timeout:") == std::vector<std::string>{"route:timeout:started", "route:timeout:stopped"});
  const auto started = events.named("route:timeout:started").at(0).details;
  CHECK(ms_of(started["timeoutMs"]) == 100);
  CHECK(started["scope"] == "step");
  CHECK(started["stepLabel"] == "to");
  CHECK(started["routeId"] == "t");
  CHECK(started.contains("exchangeId"));
  CHECK(started.contains("correlationId"));
  const auto stopped = events.named("route:timeout:stopped").at(0).details;
  CHECK(ms_of(stopped["timeoutMs"]) == 100);
  CHECK(ms_of(stopped["elapsed"]) == 60);
}

TEST_CASE("a synchronous step inside a timeout is measured, not raced: started and stopped") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("t").from(rc::simple(1)).timeout(5ms).transform([](int v) { return v + 1; }).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.count() == 1);
  CHECK(events.names("route:timeout:") == std::vector<std::string>{"route:timeout:started", "route:timeout:stopped"});
  CHECK(events.named("route:timeout:stopped").at(0).details["stepLabel"] == "transform");
}

TEST_CASE("work past its deadline is cut short at the deadline and fails with RC5011 and timeout:expired") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("t").from(traffic(burst(1), log)).timeout(50ms).to(slow_work(200ms, work)));
  ctx.start();
  ctx.drain();
  REQUIRE(log[1].failure);
  CHECK(log[1].failure->code() == rc::errc::timed_out);
  CHECK(log[1].failure->retryable());
  CHECK(log[1].failure->message() == "Step \"to\" exceeded its 50ms timeout");
  CHECK(log[1].answered == 50ms);
  // The work itself saw the abort at the deadline (it was cancelled, not left running).
  CHECK(work->cut_short == 1);
  CHECK(in_ms(work->ended) == std::vector<double>{50});
  CHECK(events.names("route:timeout:") == std::vector<std::string>{"route:timeout:started", "route:timeout:expired"});
  const auto expired = events.named("route:timeout:expired").at(0).details;
  CHECK(ms_of(expired["timeoutMs"]) == 50);
  CHECK(ms_of(expired["elapsed"]) == 50);
  CHECK(expired["scope"] == "step");
  // One route:step:error, for the RC5011.
  const auto errors = events.named("route:step:error");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].details["error"]["code"] == "RC5011");
  CHECK(ctx.clock().pending() == 0);
}

TEST_CASE("a step that ignores the abort is not interrupted: its late result is discarded for RC5011") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("t")
              .from(traffic(burst(1), log))
              .timeout(50ms)
              .to(slow_work(200ms, work, /*listens=*/false))
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(work->completed == 1);
  REQUIRE(log[1].failure);
  CHECK(log[1].failure->code() == rc::errc::timed_out);
  CHECK(log[1].answered == 200ms);
  CHECK(out.count() == 0);
}

TEST_CASE("a failure within the deadline passes through unchanged with only timeout:started") {
  rc::context ctx(rc::virtual_time);
  traffic_log log;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("t").from(traffic(burst(1), log)).timeout(50ms).to([](int&) {
    throw std::runtime_error("boom");
  }));
  ctx.start();
  ctx.drain();
  REQUIRE(log[1].failure);
  CHECK(log[1].failure->code() == rc::errc::step_failed);
  CHECK(log[1].failure->message() == "boom");
  CHECK(events.names("route:timeout:") == std::vector<std::string>{"route:timeout:started"});
}

TEST_CASE("the label names the timeout in its events and its error") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("t")
              .from(traffic(burst(1), log))
              .timeout({.after = 20ms, .label = "pricing"})
              .to(slow_work(50ms, work)));
  ctx.start();
  ctx.drain();
  REQUIRE(log[1].failure);
  CHECK(log[1].failure->message() == "Step \"pricing\" exceeded its 20ms timeout");
  CHECK(log[1].failure->details()["label"] == "pricing");
  CHECK(events.named("route:timeout:started").at(0).details["label"] == "pricing");
  CHECK(events.named("route:timeout:expired").at(0).details["label"] == "pricing");
}

// ---- cancelling the work inside -------------------------------------------------------------

TEST_CASE("a throttle wait inside a timeout ends at the deadline and gives its token back") {
  // rate 1/s, burst 1: request 1 passes at 0; 2 and 3 queue for 1 s and 2 s and time out at
  // 50 ms. Their tokens go back, so request 4 at 1 s passes at once (not at 3 s).
  rc::context ctx(rc::virtual_time);
  traffic_log log;
  rc::spy<int> out;
  event_recorder events(ctx, "route:timeout:expired");
  ctx.add(rc::craft().id("t").from(traffic(burst(3) + burst(1, 1s), log)).timeout(50ms).throttle({.rate = 1}).to(out));
  ctx.start();
  ctx.drain();
  CHECK(log[1].passed());
  for (int id : {2, 3}) {
    REQUIRE(log[id].failure);
    CHECK(log[id].failure->code() == rc::errc::timed_out);
    CHECK(log[id].answered == 50ms);
  }
  CHECK(log[4].passed());
  CHECK(log[4].answered == 1s);
  CHECK(events.count("route:timeout:expired") == 2);
}

TEST_CASE("a delay inside a timeout ends at the deadline") {
  rc::context ctx(rc::virtual_time);
  traffic_log log;
  rc::spy<int> out;
  event_recorder events(ctx, "route:delay:stopped");
  ctx.add(rc::craft().id("t").from(traffic(burst(1), log)).timeout(30ms).delay(1s).to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(log[1].failure);
  CHECK(log[1].failure->code() == rc::errc::timed_out);
  CHECK(log[1].answered == 30ms);
  CHECK(out.count() == 0);
  const auto stopped = events.named("route:delay:stopped");
  REQUIRE(stopped.size() == 1);
  CHECK(stopped[0].details["cancelled"] == true);
  CHECK(ms_of(stopped[0].details["elapsed"]) == 30);
}

TEST_CASE("a delay whose client goes away ends at once and the exchange is dropped as client-gone") {
  rc::context ctx(rc::virtual_time);
  traffic_log log;
  rc::spy<int> out;
  rc::cancel_signal hang_up(ctx.clock());
  auto script = burst(1);
  script[0].abort = &hang_up;
  ctx.add(rc::craft().id("d").from(traffic(script, log)).delay(1s).to(out));
  ctx.start();
  ctx.advance(10ms);
  hang_up.fire();
  ctx.drain();
  CHECK(log[1].drop_reason == "client-gone");
  CHECK(log[1].answered == 10ms);
  CHECK(out.count() == 0);
}

TEST_CASE("a retry backoff inside a timeout ends at the deadline") {
  rc::context ctx(rc::virtual_time);
  traffic_log log;
  event_recorder events(ctx);
  int calls = 0;
  ctx.add(rc::craft()
              .id("t")
              .from(traffic(burst(1), log))
              .timeout(100ms)
              .retry({.max_attempts = 5, .backoff = 1s})
              .to([&](int&) {
                ++calls;
                throw std::runtime_error("down");
              }));
  ctx.start();
  ctx.drain();
  CHECK(calls == 1);
  REQUIRE(log[1].failure);
  CHECK(log[1].failure->code() == rc::errc::timed_out);
  CHECK(log[1].answered == 100ms);
  const auto stopped = events.named("route:retry:stopped");
  REQUIRE(stopped.size() == 1);
  CHECK(stopped[0].at.time_since_epoch() == 100ms);
  CHECK(stopped[0].details["success"] == false);
}

TEST_CASE("a client that goes away inside a timeout still reaches the work, and it is no timeout") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx);
  rc::cancel_signal hang_up(ctx.clock());
  auto script = burst(1);
  script[0].abort = &hang_up;
  ctx.add(rc::craft().id("t").from(traffic(script, log)).timeout(1s).throttle({.rate = 1}).to(slow_work(500ms, work)));
  ctx.start();
  ctx.advance(100ms);
  hang_up.fire();
  ctx.drain();
  CHECK(work->cut_short == 1);
  CHECK(in_ms(work->ended) == std::vector<double>{100});
  REQUIRE(log[1].failure);
  CHECK(log[1].failure->code() == rc::errc::step_failed);  // the call's own failure
  CHECK(events.count("route:timeout:expired") == 0);
}

// ---- nesting and stacking -------------------------------------------------------------------

TEST_CASE("nested step timeouts: the earliest deadline wins, whichever is outside") {
  const bool inner_earlier = GENERATE(true, false);
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx);
  auto b = rc::craft().id("t").from(traffic(burst(1), log));
  if (inner_earlier)
    ctx.add(std::move(b).timeout(200ms).timeout(50ms).to(slow_work(1s, work)));
  else
    ctx.add(std::move(b).timeout(50ms).timeout(200ms).to(slow_work(1s, work)));
  ctx.start();
  ctx.drain();
  REQUIRE(log[1].failure);
  CHECK(log[1].failure->code() == rc::errc::timed_out);
  CHECK(log[1].failure->message() == "Step \"to\" exceeded its 50ms timeout");
  CHECK(log[1].answered == 50ms);
  CHECK(in_ms(work->ended) == std::vector<double>{50});
  const auto expired = events.named("route:timeout:expired");
  REQUIRE(expired.size() == 1);
  CHECK(ms_of(expired[0].details["timeoutMs"]) == 50);
  CHECK(events.count("route:timeout:started") == 2);
  CHECK(events.count("route:step:error") == 1);
}

TEST_CASE("nested route and step timeouts: the earliest deadline wins and names its scope") {
  const bool route_earlier = GENERATE(true, false);
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  ctx.add(rc::craft()
              .id("r")
              .timeout(route_earlier ? 50ms : 200ms)
              .from(traffic(burst(1), log))
              .timeout(route_earlier ? 200ms : 50ms)
              .to(slow_work(1s, work)));
  ctx.start();
  ctx.drain();
  REQUIRE(log[1].failure);
  CHECK(log[1].failure->code() == rc::errc::timed_out);
  CHECK(log[1].failure->message() ==
        (route_earlier ? "Route \"r\" pipeline exceeded its 50ms timeout" : "Step \"to\" exceeded its 50ms timeout"));
  CHECK(log[1].answered == 50ms);
  CHECK(in_ms(work->ended) == std::vector<double>{50});
}

TEST_CASE("step scope: .timeout().retry().to() bounds all attempts, .retry().timeout().to() bounds each") {
  SECTION("timeout outside retry: one deadline for the whole retry") {
    rc::context ctx(rc::virtual_time);
    auto work = std::make_shared<work_log>();
    traffic_log log;
    event_recorder events(ctx);
    ctx.add(rc::craft()
                .id("t")
                .from(traffic(burst(1), log))
                .timeout(100ms)
                .retry({.max_attempts = 3, .backoff = 10ms})
                .to(slow_work(40ms, work, true, 3)));
    ctx.start();
    ctx.drain();
    // attempts at 0 and 50 ms fail at 40 and 90 ms; the third (100 ms) never starts.
    CHECK(in_ms(work->started) == std::vector<double>{0, 50});
    REQUIRE(log[1].failure);
    CHECK(log[1].failure->code() == rc::errc::timed_out);
    CHECK(log[1].answered == 100ms);
    CHECK(events.count("route:timeout:expired") == 1);
  }
  SECTION("retry outside timeout: every attempt gets its own deadline and RC5011 is retried") {
    rc::context ctx(rc::virtual_time);
    auto work = std::make_shared<work_log>();
    traffic_log log;
    event_recorder events(ctx);
    ctx.add(rc::craft()
                .id("t")
                .from(traffic(burst(1), log))
                .retry({.max_attempts = 3, .backoff = 10ms})
                .timeout(50ms)
                .to(slow_work(1s, work)));
    ctx.start();
    ctx.drain();
    CHECK(in_ms(work->started) == std::vector<double>{0, 60, 120});
    CHECK(in_ms(work->ended) == std::vector<double>{50, 110, 170});
    CHECK(events.count("route:timeout:expired") == 3);
    CHECK(events.count("route:retry:attempt") == 2);
    REQUIRE(log[1].failure);
    CHECK(log[1].failure->code() == rc::errc::timed_out);
    CHECK(log[1].answered == 170ms);
  }
}

// ---- route scope ----------------------------------------------------------------------------

TEST_CASE("route scope: every attempt gets its own deadline under a route retry") {
  // The chain is fixed: retry outside timeout whatever the builder order.
  const bool timeout_first = GENERATE(true, false);
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx);
  auto b = rc::craft().id("r");
  if (timeout_first)
    std::move(b).timeout(50ms).retry({.max_attempts = 2, .backoff = 10ms});
  else
    std::move(b).retry({.max_attempts = 2, .backoff = 10ms}).timeout(50ms);
  ctx.add(std::move(b).from(traffic(burst(1), log)).to(slow_work(1s, work)));
  ctx.start();
  ctx.drain();
  CHECK(in_ms(work->started) == std::vector<double>{0, 60});
  const auto expired = events.named("route:timeout:expired");
  REQUIRE(expired.size() == 2);
  CHECK(expired[0].at.time_since_epoch() == 50ms);
  CHECK(expired[1].at.time_since_epoch() == 110ms);
  for (const auto& e : expired) {
    CHECK(ms_of(e.details["elapsed"]) == 50);
    CHECK(e.details["scope"] == "route");
    CHECK(e.details["stepLabel"] == "route");
  }
  REQUIRE(log[1].failure);
  CHECK(log[1].failure->code() == rc::errc::timed_out);
  CHECK(log[1].failure->message() == "Route \"r\" pipeline exceeded its 50ms timeout");
  CHECK(log[1].answered == 110ms);
  // One route:step:error in all: the final RC5011, none for the abandoned calls.
  const auto errors = events.named("route:step:error");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].details["error"]["code"] == "RC5011");
}

TEST_CASE("route scope: a pipeline in time emits started and stopped with scope route") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .timeout(1s)
              .from(traffic(burst(1), log))
              .to(slow_work(100ms, work))
              .to(slow_work(100ms, work)));
  ctx.start();
  ctx.drain();
  CHECK(log[1].passed());
  CHECK(events.names("route:timeout:") == std::vector<std::string>{"route:timeout:started", "route:timeout:stopped"});
  const auto stopped = events.named("route:timeout:stopped").at(0).details;
  CHECK(stopped["scope"] == "route");
  CHECK(ms_of(stopped["elapsed"]) == 200);
}

TEST_CASE("route scope: no further step is scheduled once the deadline has passed") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx);
  int later = 0;
  ctx.add(rc::craft()
              .id("r")
              .timeout(50ms)
              .from(traffic(burst(1), log))
              .to(slow_work(80ms, work, /*listens=*/false))
              .to([&](int&) { ++later; }));
  ctx.start();
  ctx.drain();
  CHECK(work->completed == 1);
  CHECK(later == 0);
  REQUIRE(log[1].failure);
  CHECK(log[1].failure->code() == rc::errc::timed_out);
  CHECK(log[1].answered == 80ms);
  CHECK(events.count("route:step:error") == 1);
}

// ---- validation -----------------------------------------------------------------------------

TEST_CASE("timeout rejects a deadline under 1ms with RC5003 naming after and the value") {
  CHECK_THROWS_MATCHES(rc::craft().timeout(0ms), rc::error,
                       rc_error(rc::errc::misconfigured, "timeout({ after }) must be a duration >= 1ms, got 0ms."));
  CHECK_THROWS_MATCHES(rc::craft().timeout(999us), rc::error, rc_error(rc::errc::misconfigured, "got 0.999ms"));
  CHECK_THROWS_MATCHES(rc::craft().timeout(-5ms), rc::error, rc_error(rc::errc::misconfigured, "got -5ms"));
  CHECK_THROWS_MATCHES(rc::craft().timeout({.label = "x"}), rc::error, rc_error(rc::errc::misconfigured, "after"));
  auto b = rc::craft().id("v").from(rc::simple(1));
  CHECK_THROWS_MATCHES(std::move(b).timeout(0ms), rc::error, rc_error(rc::errc::misconfigured, "timeout({ after })"));
  CHECK_NOTHROW(rc::craft().timeout(1ms));
}

TEST_CASE("a route-scope timeout called twice keeps the last") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  ctx.add(rc::craft().id("r").timeout(10ms).timeout(30ms).from(traffic(burst(1), log)).to(slow_work(1s, work)));
  ctx.start();
  ctx.drain();
  REQUIRE(log[1].failure);
  CHECK(log[1].answered == 30ms);
}

// ---- real time --------------------------------------------------------------------------------

TEST_CASE("on the real clock a deadline cuts a delay short and a slow synchronous step fails late") {
  rc::context ctx;
  rc::spy<int> out;
  event_recorder failed(ctx, "route:exchange:failed");  // timeout events unheard: coarse timing
  ctx.add(rc::craft().id("wait").from(rc::simple(1)).timeout(20ms).delay(10s).to(out));
  ctx.add(rc::craft()
              .id("busy")
              .from(rc::simple(std::vector<int>{1, 2}))
              .timeout(50ms)  // body 1 must finish inside it even on a loaded machine
              .transform([](int v) {
                if (v == 2) std::this_thread::sleep_for(200ms);
                return v;
              })
              .to(out));
  const auto t0 = std::chrono::steady_clock::now();
  ctx.start();
  ctx.drain();
  const auto took = std::chrono::steady_clock::now() - t0;
  ctx.stop();
  CHECK(took < 5s);  // the 10 s delay did not run out
  CHECK(out.count() == 1);
  const auto failures = failed.all();
  REQUIRE(failures.size() == 2);
  for (const auto& f : failures) CHECK(f.details["error"]["code"] == "RC5011");
}

}  // namespace timeout_test
