// Delay through the DSL (reference §7.1, §14 delay scenarios, issue 2 item 8), in virtual time.
#include <catch2/catch.hpp>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>

#include "support/dsl_support.hpp"

namespace delay_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;
using rc::test::in_ms;
using rc::test::rc_error;

TEST_CASE("delay holds the exchange for its duration and leaves the body unchanged") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  ctx.add(rc::craft().id("d").from(rc::simple(std::string("payload"))).delay(10ms).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<std::string>{"payload"});
  CHECK(in_ms(out.times()) == std::vector<double>{10});
}

TEST_CASE("delay emits started and stopped once, with scope step, the step's label and cancelled false") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("d").from(rc::simple(1)).delay(10ms).to(out));
  ctx.start();
  ctx.drain();
  CHECK(events.names("route:delay:") == std::vector<std::string>{"route:delay:started", "route:delay:stopped"});
  const auto started = events.named("route:delay:started")[0].details;
  const auto stopped = events.named("route:delay:stopped")[0].details;
  for (const auto& d : {started, stopped}) {
    CHECK(d["routeId"] == "d");
    CHECK(d["exchangeId"].is_string());
    CHECK(d["correlationId"].is_string());
    CHECK(d["scope"] == "step");
    CHECK(d["stepLabel"] == "to");
    CHECK(d["delayMs"].get<double>() == 10.0);
  }
  CHECK(stopped["elapsed"].get<double>() == 10.0);
  CHECK(stopped["cancelled"] == false);
}

TEST_CASE("retry declared before delay repeats the delay on each attempt") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  std::vector<rc::duration> calls;
  ctx.add(rc::craft().id("d").from(rc::simple(1)).retry({.max_attempts = 2, .backoff = 0ms}).delay(10ms).to([&](int&) {
    calls.push_back(ctx.now().time_since_epoch());
    if (calls.size() == 1) throw std::runtime_error("first attempt fails");
  }));
  ctx.start();
  ctx.drain();
  CHECK(events.count("route:delay:started") == 2);
  CHECK(events.count("route:delay:stopped") == 2);
  CHECK(in_ms(calls) == std::vector<double>{10, 20});
}

TEST_CASE("stopping the context during delay(5s) cuts the wait short, marks it cancelled and still delivers") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx, "route:delay:stopped");
  ctx.add(rc::craft().id("d").from(rc::simple(1)).delay(5s).to(out));
  ctx.start();
  ctx.advance(1s);
  REQUIRE(out.count() == 0);
  ctx.stop();
  CHECK(in_ms(out.times()) == std::vector<double>{1000});
  REQUIRE(events.count("route:delay:stopped") == 1);
  const auto stopped = events.all()[0].details;
  CHECK(stopped["cancelled"] == true);
  CHECK(stopped["elapsed"].get<double>() < 5000.0);
  CHECK(stopped["elapsed"].get<double>() == 1000.0);
}

TEST_CASE("delay(0ms) runs the step at once, after exchanges queued before it") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft().id("d").from(rc::simple(std::vector<int>{1, 2, 3})).delay(0ms).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{1, 2, 3});
  CHECK(in_ms(out.times()) == std::vector<double>{0, 0, 0});
}

TEST_CASE("a negative delay is RC5003 naming delay") {
  auto b = rc::craft().id("d").from(rc::simple(1));
  CHECK_THROWS_MATCHES(std::move(b).delay(-1ms), rc::error, rc_error(rc::errc::misconfigured, "delay({ delay })"));
}

TEST_CASE("delay before from() is RC2001: delay has no route scope") {
  CHECK_THROWS_MATCHES(rc::craft().id("d").delay(10ms), rc::error, rc_error(rc::errc::invalid_dsl, "delay()"));
}

}  // namespace delay_test
