// The event bus as a route author sees it (reference §8, issue 2 item 5).
#include <catch2/catch.hpp>
#include <cstdio>
#include <memory>
#include <rc/rc.hpp>
#include <regex>
#include <stdexcept>
#include <string>

#include "support/dsl_support.hpp"

namespace events_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;
using rc::test::rc_error;

namespace {

/// A log destination writing to a temporary file instead of stdout.
struct quiet_log {
  std::FILE* file = std::tmpfile();
  ~quiet_log() {
    if (file) std::fclose(file);
  }
  rc::log_destination destination() const { return rc::log_destination("", file); }
};

}  // namespace

TEST_CASE("the happy path simple -> transform -> to(log) emits the reference's sequence exactly") {
  rc::context ctx(rc::virtual_time);
  quiet_log log;
  ctx.add(rc::craft()
              .id("hello")
              .from(rc::simple(std::string("hi")))
              .transform([](std::string s) { return s + "!"; })
              .to(log.destination()));
  event_recorder events(ctx);
  ctx.start();
  ctx.drain();
  ctx.stop();
  CHECK(events.names() == std::vector<std::string>{"context:starting", "context:started", "route:starting",
                                                   "route:started", "route:exchange:started", "route:step:started",
                                                   "route:step:completed", "route:step:started", "route:step:completed",
                                                   "route:exchange:completed", "route:stopping", "route:stopped",
                                                   "context:stopping", "context:stopped"});
  const auto steps = events.named("route:step:started");
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].details["operation"] == "transform");
  CHECK(steps[1].details["operation"] == "to");
  CHECK(steps[1].details["adapter"] == "log");
  const auto completed = events.named("route:exchange:completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0].details["exchange"]["body"] == "hi!");
  CHECK(completed[0].details["duration"].is_number());
}

TEST_CASE(
    "a transform that throws emits step:error, route:error, context:error, exchange:failed and no step:completed") {
  rc::context ctx(rc::virtual_time);
  quiet_log log;
  ctx.add(rc::craft()
              .id("broken")
              .from(rc::simple(std::string("hi")))
              .transform([](std::string) -> std::string { throw std::runtime_error("bad input"); })
              .to(log.destination()));
  event_recorder events(ctx);
  ctx.start();
  ctx.drain();
  ctx.stop();
  CHECK(events.names() == std::vector<std::string>{"context:starting", "context:started", "route:starting",
                                                   "route:started", "route:exchange:started", "route:step:started",
                                                   "route:step:error", "route:error", "context:error",
                                                   "route:exchange:failed", "route:stopping", "route:stopped",
                                                   "context:stopping", "context:stopped"});
  const auto step_error = events.named("route:step:error");
  REQUIRE(step_error.size() == 1);
  CHECK(step_error[0].details["operation"] == "transform");
  CHECK(step_error[0].details["error"]["code"] == "RC5001");
  CHECK(step_error[0].details["error"]["message"] == "bad input");
  CHECK(events.named("route:exchange:failed")[0].details["error"]["code"] == "RC5001");
}

TEST_CASE("the catch-all \"*\" sees every event in emission order, each tagged with _event") {
  rc::context ctx(rc::virtual_time);
  auto order = std::make_shared<std::vector<std::string>>();
  auto all = std::make_shared<std::vector<std::string>>();
  auto tags_match = std::make_shared<bool>(true);
  rc::subscription s1 = ctx.on("route:exchange:started", [order](const rc::event& e) { order->emplace_back(e.name); });
  rc::subscription s2 = ctx.on("route:step:started", [order](const rc::event& e) { order->emplace_back(e.name); });
  rc::subscription s3 =
      ctx.on("route:exchange:completed", [order](const rc::event& e) { order->emplace_back(e.name); });
  rc::subscription star = ctx.on("*", [all, tags_match](const rc::event& e) {
    all->emplace_back(e.name);
    if (e.to_json()["_event"] != std::string(e.name)) *tags_match = false;
  });
  ctx.add(
      rc::craft().id("r").from(rc::simple(std::vector<int>{1, 2})).transform([](int v) { return v; }).to(rc::noop()));
  ctx.start();
  ctx.drain();
  std::vector<std::string> filtered;
  for (const auto& n : *all)
    if (n == "route:exchange:started" || n == "route:step:started" || n == "route:exchange:completed")
      filtered.push_back(n);
  CHECK(filtered == *order);
  CHECK(order->size() == 8);
  CHECK(all->front() == "route:registered");
  CHECK(*tags_match);
}

TEST_CASE("exact-name handlers run before catch-all handlers for the same event") {
  rc::context ctx(rc::virtual_time);
  auto calls = std::make_shared<std::vector<std::string>>();
  rc::subscription star = ctx.on("*", [calls](const rc::event& e) {
    if (e.name == "route:exchange:started") calls->push_back("*");
  });
  rc::subscription exact = ctx.on("route:exchange:started", [calls](const rc::event&) { calls->push_back("exact"); });
  ctx.add(rc::craft().id("r").from(rc::simple(1)).to(rc::noop()));
  ctx.start();
  ctx.drain();
  CHECK(*calls == std::vector<std::string>{"exact", "*"});
}

TEST_CASE("subscribing to a pattern other than \"*\" is RC2001") {
  rc::context ctx(rc::virtual_time);
  for (const char* pattern : {"route:*", "route:**", "route:*:exchange:*", "plugin:*:*", "**"}) {
    INFO(pattern);
    CHECK_THROWS_MATCHES(ctx.on(pattern, [](const rc::event&) {}), rc::error,
                         rc_error(rc::errc::invalid_dsl, "pattern"));
  }
}

TEST_CASE("subscribing to an unknown event name is RC2001") {
  rc::context ctx(rc::virtual_time);
  CHECK_THROWS_MATCHES(ctx.on("route:exchange:exploded", [](const rc::event&) {}), rc::error,
                       rc_error(rc::errc::invalid_dsl, "unknown event name"));
  CHECK_THROWS_MATCHES(ctx.once("error", [](const rc::event&) {}), rc::error, rc_error(rc::errc::invalid_dsl, "error"));
}

TEST_CASE("for_route sees only the events of its route") {
  rc::context ctx(rc::virtual_time);
  auto seen = std::make_shared<std::vector<rc::test::recorded_event>>();
  rc::subscription sub = ctx.for_route("a", [seen](const rc::event& e) {
    seen->push_back({std::string(e.name), e.details, e.at, {}});
  });
  ctx.add(rc::craft().id("a").from(rc::simple(1)).to(rc::noop()));
  ctx.add(rc::craft().id("b").from(rc::simple(2)).to(rc::noop()));
  ctx.start();
  ctx.drain();
  REQUIRE_FALSE(seen->empty());
  int exchanges = 0;
  for (const auto& e : *seen) {
    CHECK(e.details["routeId"] == "a");
    if (e.name == "route:exchange:started") ++exchanges;
  }
  CHECK(exchanges == 1);
}

TEST_CASE("once fires its handler for the first event only") {
  rc::context ctx(rc::virtual_time);
  int calls = 0;
  rc::subscription sub = ctx.once("route:exchange:started", [&](const rc::event&) { ++calls; });
  ctx.add(rc::craft().id("r").from(rc::simple(std::vector<int>{1, 2, 3})).to(rc::noop()));
  ctx.start();
  ctx.drain();
  CHECK(calls == 1);
}

TEST_CASE("a once subscription cancelled before the event never fires") {
  rc::context ctx(rc::virtual_time);
  int calls = 0;
  rc::subscription sub = ctx.once("route:exchange:started", [&](const rc::event&) { ++calls; });
  sub.unsubscribe();
  CHECK_FALSE(sub.active());
  {
    rc::subscription dropped = ctx.once("route:exchange:started", [&](const rc::event&) { ++calls; });
  }
  ctx.add(rc::craft().id("r").from(rc::simple(1)).to(rc::noop()));
  ctx.start();
  ctx.drain();
  CHECK(calls == 0);
}

TEST_CASE("a subscription unsubscribes when destroyed (RAII)") {
  rc::context ctx(rc::virtual_time);
  int calls = 0;
  ctx.start();
  {
    rc::subscription sub = ctx.on("route:exchange:started", [&](const rc::event&) { ++calls; });
    ctx.add(rc::craft().id("first").from(rc::simple(1)).to(rc::noop()));
    ctx.drain();
    REQUIRE(calls == 1);
  }
  ctx.add(rc::craft().id("second").from(rc::simple(2)).to(rc::noop()));
  ctx.drain();
  CHECK(calls == 1);
}

TEST_CASE("an explicit unsubscribe stops the handler at once") {
  rc::context ctx(rc::virtual_time);
  int calls = 0;
  ctx.start();
  rc::subscription sub = ctx.on("route:exchange:started", [&](const rc::event&) { ++calls; });
  ctx.add(rc::craft().id("first").from(rc::simple(1)).to(rc::noop()));
  ctx.drain();
  REQUIRE(calls == 1);
  sub.unsubscribe();
  CHECK_FALSE(sub.active());
  ctx.add(rc::craft().id("second").from(rc::simple(2)).to(rc::noop()));
  ctx.drain();
  CHECK(calls == 1);
}

TEST_CASE("a handler that throws is reported as context:error and the pipeline still delivers") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  rc::subscription bad =
      ctx.on("route:exchange:started", [](const rc::event&) { throw std::runtime_error("handler bug"); });
  event_recorder errors(ctx, "context:error");
  ctx.add(rc::craft().id("r").from(rc::simple(std::vector<int>{1, 2})).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{1, 2});
  const auto reported = errors.all();
  REQUIRE(reported.size() == 2);
  CHECK(reported[0].details["error"]["message"] == "handler bug");
  CHECK(reported[0].details["event"] == "route:exchange:started");
}

TEST_CASE("a context:error handler that throws is not re-reported (no recursion)") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  int error_calls = 0;
  rc::subscription bad = ctx.on("route:exchange:started", [](const rc::event&) { throw std::runtime_error("first"); });
  rc::subscription worse = ctx.on("context:error", [&](const rc::event&) {
    ++error_calls;
    throw std::runtime_error("second");
  });
  ctx.add(rc::craft().id("r").from(rc::simple(1)).to(out));
  ctx.start();
  ctx.drain();
  CHECK(error_calls == 1);
  CHECK(out.count() == 1);
}

TEST_CASE("a throwing handler does not keep the event from the other handlers of the same event") {
  rc::context ctx(rc::virtual_time);
  int before = 0, after = 0, catch_all = 0;
  rc::subscription first = ctx.on("route:exchange:started", [&](const rc::event&) { ++before; });
  rc::subscription bad = ctx.on("route:exchange:started", [](const rc::event&) { throw std::runtime_error("bug"); });
  rc::subscription last = ctx.on("route:exchange:started", [&](const rc::event&) { ++after; });
  rc::subscription all = ctx.on("*", [&](const rc::event& e) {
    if (e.name == "route:exchange:started") ++catch_all;
  });
  event_recorder errors(ctx, "context:error");
  ctx.add(rc::craft().id("r").from(rc::simple(std::vector<int>{1, 2, 3})).to(rc::noop()));
  ctx.start();
  ctx.drain();
  CHECK(before == 3);
  CHECK(after == 3);
  CHECK(catch_all == 3);
  const auto reported = errors.all();
  REQUIRE(reported.size() == 3);  // once per failure
  for (const auto& e : reported) {
    CHECK(e.details["event"] == "route:exchange:started");
    CHECK(e.details["source"] == "event-handler");
    CHECK(e.details["error"]["message"] == "bug");
  }
}

TEST_CASE("a context:error handler that throws is reported once, as context:error naming context:error") {
  rc::context ctx(rc::virtual_time);
  int bad_calls = 0;
  event_recorder errors(ctx, "context:error");  // subscribed first: sees each event before `bad`
  rc::subscription bad = ctx.on("context:error", [&](const rc::event&) {
    ++bad_calls;
    throw std::runtime_error("error handler bug");
  });
  ctx.add(
      rc::craft().id("r").from(rc::simple(1)).transform([](int) -> int { throw std::runtime_error("step failed"); }));
  ctx.start();
  ctx.drain();
  const auto reported = errors.all();
  REQUIRE(reported.size() == 2);  // the route's failure, then the handler's, and nothing more
  CHECK(reported[0].details["route"] == "r");
  CHECK(reported[1].details["event"] == "context:error");
  CHECK(reported[1].details["source"] == "event-handler");
  CHECK(reported[1].details["error"]["message"] == "error handler bug");
  CHECK(bad_calls == 2);  // it saw the report of its own failure, threw again: not reported again
}

TEST_CASE("a catch-all handler that throws on everything is reported once per event, without recursing") {
  rc::context ctx(rc::virtual_time);
  rc::subscription bad = ctx.on("*", [](const rc::event&) { throw std::runtime_error("always"); });
  event_recorder errors(ctx, "context:error");
  event_recorder started(ctx, "route:exchange:started");
  ctx.add(rc::craft().id("r").from(rc::simple(std::vector<int>{1, 2})).to(rc::noop()));
  ctx.start();
  ctx.drain();
  REQUIRE(started.count("route:exchange:started") == 2);
  std::size_t for_started = 0;
  for (const auto& e : errors.all()) {
    CHECK(e.details["event"] != "context:error");  // the failing reports are not reported
    if (e.details["event"] == "route:exchange:started") ++for_started;
  }
  CHECK(for_started == 2);
}

TEST_CASE("the payload envelope is {ts, contextId, details, _event} with an ISO-8601 ts") {
  rc::context ctx(rc::virtual_time, {.id = "ctx-test"});
  event_recorder events(ctx, "route:throttle:delayed");
  event_recorder completed(ctx, "route:exchange:completed");
  ctx.add(
      rc::craft().id("r").from(rc::simple(std::vector<int>{1, 2})).throttle({.rate = 2, .burst = 1}).to(rc::noop()));
  ctx.start();
  ctx.drain();
  REQUIRE(events.count("route:throttle:delayed") == 1);
  const auto env = events.all()[0].envelope;
  CHECK(env.size() == 4);
  CHECK(env["contextId"] == "ctx-test");
  CHECK(env["_event"] == "route:throttle:delayed");
  CHECK(env["details"]["routeId"] == "r");
  CHECK(env["details"]["correlationId"].is_string());
  CHECK(std::regex_match(env["ts"].get<std::string>(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
  // Virtual time renders from the engine epoch: the second exchange completes at 500 ms.
  CHECK(completed.all().back().envelope["ts"] == "1970-01-01T00:00:00.500Z");
}

}  // namespace events_test
