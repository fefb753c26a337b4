// Retry through the DSL (reference §6, §14 retry scenarios, issue 2 item 7), in virtual time.
#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>

#include "support/dsl_support.hpp"

namespace retry_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;
using rc::test::in_ms;
using rc::test::rc_error;

namespace {

/// The backoffMs of every route:retry:attempt event, in order.
std::vector<double> backoffs(const event_recorder& events) {
  std::vector<double> out;
  for (const auto& e : events.named("route:retry:attempt")) out.push_back(e.details["backoffMs"].get<double>());
  return out;
}

/// A step that fails `failures` times, then succeeds; records when it was called.
struct flaky {
  int failures;
  std::vector<rc::duration>* calls;
  rc::context* ctx;
  void operator()(int&) {
    calls->push_back(ctx->now().time_since_epoch());
    if (static_cast<int>(calls->size()) <= failures) throw std::runtime_error("boom");
  }
};

}  // namespace

TEST_CASE("a first-attempt success emits exactly retry:started and retry:stopped") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("r").from(rc::simple(1)).retry({.max_attempts = 3, .backoff = 10ms}).to(out));
  ctx.start();
  ctx.drain();
  CHECK(events.names("route:retry:") == std::vector<std::string>{"route:retry:started", "route:retry:stopped"});
  const auto stopped = events.named("route:retry:stopped");
  REQUIRE(stopped.size() == 1);
  CHECK(stopped[0].details["attemptNumber"] == 1);
  CHECK(stopped[0].details["success"] == true);
  CHECK(stopped[0].details["scope"] == "step");
  CHECK_FALSE(stopped[0].details.contains("error"));
  CHECK(out.count() == 1);
}

TEST_CASE("a step that fails twice then succeeds is called 3 times, with attempts #1 and #2, and delivered") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  std::vector<rc::duration> calls;
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .retry({.max_attempts = 3, .backoff = 10ms})
              .to(flaky{2, &calls, &ctx})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(calls.size() == 3);
  const auto attempts = events.named("route:retry:attempt");
  REQUIRE(attempts.size() == 2);
  CHECK(attempts[0].details["attemptNumber"] == 1);
  CHECK(attempts[1].details["attemptNumber"] == 2);
  CHECK(attempts[0].details["maxAttempts"] == 3);
  CHECK(attempts[0].details["lastError"]["code"] == "RC5001");
  CHECK(attempts[0].details["lastError"]["message"] == "boom");
  CHECK(out.count() == 1);
  const auto stopped = events.named("route:retry:stopped");
  REQUIRE(stopped.size() == 1);
  CHECK(stopped[0].details["attemptNumber"] == 3);
  CHECK(stopped[0].details["success"] == true);
  CHECK(events.count("route:exchange:completed") == 1);
}

TEST_CASE("a step that always fails surfaces one error after max_attempts, with stopped {2, false, error}") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  std::vector<rc::duration> calls;
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .retry({.max_attempts = 2, .backoff = 10ms})
              .to(flaky{100, &calls, &ctx})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(calls.size() == 2);
  CHECK(out.count() == 0);
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].details["error"]["code"] == "RC5001");
  CHECK(failed[0].details["error"]["message"] == "boom");  // the final error, unchanged
  const auto stopped = events.named("route:retry:stopped");
  REQUIRE(stopped.size() == 1);
  CHECK(stopped[0].details["attemptNumber"] == 2);
  CHECK(stopped[0].details["success"] == false);
  CHECK(stopped[0].details["error"]["message"] == "boom");
}

TEST_CASE("a non-retryable error (RC5002) is not retried: one call and no attempt event") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  int calls = 0;
  ctx.add(rc::craft().id("r").from(rc::simple(1)).retry({.max_attempts = 3, .backoff = 10ms}).to([&](int&) {
    ++calls;
    throw rc::error(rc::errc::validation, "bad body");
  }));
  ctx.start();
  ctx.drain();
  CHECK(calls == 1);
  CHECK(events.count("route:retry:attempt") == 0);
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].details["error"]["code"] == "RC5002");
}

TEST_CASE("retry_on returning true retries even a non-retryable error") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  int calls = 0;
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .retry({.max_attempts = 3, .backoff = 10ms, .retry_on = [](const rc::error&) { return true; }})
              .to([&](int&) {
                ++calls;
                throw rc::error(rc::errc::validation, "bad body");
              }));
  ctx.start();
  ctx.drain();
  CHECK(calls == 3);
  CHECK(events.count("route:retry:attempt") == 2);
}

TEST_CASE("retry_on returning false stops at the first failure of a retryable error") {
  rc::context ctx(rc::virtual_time);
  int calls = 0;
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .retry({.max_attempts = 3, .backoff = 10ms, .retry_on = [](const rc::error&) { return false; }})
              .to([&](int&) {
                ++calls;
                throw std::runtime_error("transient");
              }));
  ctx.start();
  ctx.drain();
  CHECK(calls == 1);
}

TEST_CASE("backoff 10 ms with factor 2 waits 10 then 20 ms") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  std::vector<rc::duration> calls;
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .retry({.max_attempts = 3, .backoff = 10ms, .factor = 2})
              .to(flaky{100, &calls, &ctx}));
  ctx.start();
  ctx.drain();
  CHECK(backoffs(events) == std::vector<double>{10, 20});
  CHECK(in_ms(calls) == std::vector<double>{0, 10, 30});
}

TEST_CASE("backoff 0 with factor 2 waits 0 and 0 ms") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  std::vector<rc::duration> calls;
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .retry({.max_attempts = 3, .backoff = 0ms, .factor = 2})
              .to(flaky{100, &calls, &ctx}));
  ctx.start();
  ctx.drain();
  CHECK(backoffs(events) == std::vector<double>{0, 0});
  CHECK(in_ms(calls) == std::vector<double>{0, 0, 0});
}

TEST_CASE("backoff 10 ms with factor 10 capped at 50 ms waits 10, 50, 50 ms") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  std::vector<rc::duration> calls;
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .retry({.max_attempts = 4, .backoff = 10ms, .factor = 10, .max_backoff = 50ms})
              .to(flaky{100, &calls, &ctx}));
  ctx.start();
  ctx.drain();
  CHECK(backoffs(events) == std::vector<double>{10, 50, 50});
  CHECK(in_ms(calls) == std::vector<double>{0, 10, 60, 110});
}

TEST_CASE("jitter 0.5 on a 100 ms backoff waits between 50 and 100 ms, both included, and not always the same") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(std::vector<int>{1, 2, 3, 4}))
              .retry({.max_attempts = 6, .backoff = 100ms, .jitter = 0.5})
              .to([](int&) { throw std::runtime_error("always"); }));
  ctx.start();
  ctx.drain();
  const auto waits = backoffs(events);
  REQUIRE(waits.size() == 20);
  for (double w : waits) {
    CHECK(w >= 50.0);
    CHECK(w <= 100.0);
  }
  CHECK(std::adjacent_find(waits.begin(), waits.end(), std::not_equal_to<>()) != waits.end());
}

TEST_CASE("full jitter waits between 0 and backoff, both included") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .retry({.max_attempts = 5, .backoff = 100ms, .jitter = rc::jitter::full})
              .to([](int&) { throw std::runtime_error("always"); }));
  ctx.start();
  ctx.drain();
  const auto waits = backoffs(events);
  REQUIRE(waits.size() == 4);
  for (double w : waits) {
    CHECK(w >= 0.0);
    CHECK(w <= 100.0);
  }
}

TEST_CASE("retry rejects max_attempts 0 with RC5003 naming max_attempts, in both scopes") {
  CHECK_THROWS_MATCHES(rc::craft().retry({.max_attempts = 0}), rc::error,
                       rc_error(rc::errc::misconfigured, "retry({ max_attempts })"));
  auto b = rc::craft().id("v").from(rc::simple(1));
  CHECK_THROWS_MATCHES(std::move(b).retry({.max_attempts = 0}), rc::error,
                       rc_error(rc::errc::misconfigured, "max_attempts"));
}

TEST_CASE("retry rejects a negative backoff with RC5003 naming backoff, in both scopes") {
  CHECK_THROWS_MATCHES((rc::craft().retry({.max_attempts = 2, .backoff = -100ms})), rc::error,
                       rc_error(rc::errc::misconfigured, "retry({ backoff })"));
  auto b = rc::craft().id("v").from(rc::simple(1));
  CHECK_THROWS_MATCHES(std::move(b).retry({.backoff = -100ms}), rc::error, rc_error(rc::errc::misconfigured, "-100ms"));
}

TEST_CASE("retry rejects a factor below 1, a max_backoff below 1 ms and a jitter outside 0 to 1 with RC5003") {
  CHECK_THROWS_MATCHES(rc::craft().retry({.factor = 0.5}), rc::error,
                       rc_error(rc::errc::misconfigured, "retry({ factor })"));
  CHECK_THROWS_MATCHES(rc::craft().retry({.max_backoff = 0ms}), rc::error,
                       rc_error(rc::errc::misconfigured, "retry({ max_backoff })"));
  CHECK_THROWS_MATCHES(rc::craft().retry({.jitter = 1.5}), rc::error,
                       rc_error(rc::errc::misconfigured, "retry({ jitter })"));
  CHECK_THROWS_MATCHES(rc::craft().retry({.jitter = -0.1}), rc::error, rc_error(rc::errc::misconfigured, "jitter"));
}

TEST_CASE("a route-scope retry emits started {scope route, stepLabel route, maxAttempts} and re-runs the pipeline") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  int first = 0, second = 0;
  ctx.add(rc::craft()
              .id("rr")
              .retry({.max_attempts = 2, .backoff = 0ms})
              .from(rc::simple(1))
              .to([&](int&) { ++first; })
              .to([&](int&) {
                ++second;
                throw std::runtime_error("downstream");
              }));
  ctx.start();
  ctx.drain();
  CHECK(first == 2);
  CHECK(second == 2);
  const auto started = events.named("route:retry:started");
  REQUIRE(started.size() == 1);
  CHECK(started[0].details["scope"] == "route");
  CHECK(started[0].details["stepLabel"] == "route");
  CHECK(started[0].details["maxAttempts"] == 2);
  CHECK(started[0].details["routeId"] == "rr");
  CHECK(events.count("route:exchange:failed") == 1);
}

TEST_CASE("a route-scope retry recovers when a later attempt succeeds") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  std::vector<rc::duration> calls;
  ctx.add(rc::craft()
              .id("rr")
              .retry({.max_attempts = 3, .backoff = 5ms})
              .from(rc::simple(1))
              .to(flaky{1, &calls, &ctx})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(in_ms(calls) == std::vector<double>{0, 5});
  CHECK(out.count() == 1);
  CHECK(events.count("route:exchange:completed") == 1);
  CHECK(events.count("route:exchange:failed") == 0);
}

TEST_CASE("stopping the context during a 10 s backoff surfaces the error at once after one call") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  int calls = 0;
  ctx.add(rc::craft().id("r").from(rc::simple(1)).retry({.max_attempts = 3, .backoff = 10s}).to([&](int&) {
    ++calls;
    throw std::runtime_error("down");
  }));
  ctx.start();
  ctx.advance(100ms);
  REQUIRE(events.count("route:retry:attempt") == 1);
  ctx.stop();
  CHECK(calls == 1);
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].at.time_since_epoch() == 100ms);
  CHECK(failed[0].details["error"]["message"] == "down");
  const auto stopped = events.named("route:retry:stopped");
  REQUIRE(stopped.size() == 1);
  CHECK(stopped[0].details["attemptNumber"] == 1);
  CHECK(stopped[0].details["success"] == false);
}

TEST_CASE("retry_after_ms in an error's details sets the minimum backoff") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  std::vector<rc::duration> calls;
  ctx.add(rc::craft().id("r").from(rc::simple(1)).retry({.max_attempts = 2, .backoff = 10ms}).to([&](int&) {
    calls.push_back(ctx.now().time_since_epoch());
    if (calls.size() == 1)
      throw rc::error(rc::errc::connection_failed, "429 Too Many Requests", true, nullptr, {{"retry_after_ms", 250}});
  }));
  ctx.start();
  ctx.drain();
  CHECK(backoffs(events) == std::vector<double>{250});
  CHECK(in_ms(calls) == std::vector<double>{0, 250});
}

TEST_CASE("a step retry around a reject-mode throttle waits for the throttle's retry-after, then passes") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(std::vector<int>{1, 2}))
              .retry({.max_attempts = 2, .backoff = 1ms})
              .throttle({.rate = 1, .mode = rc::throttle_mode::reject})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{1, 2});
  CHECK(in_ms(out.times()) == std::vector<double>{0, 1000});
  CHECK(backoffs(events) == std::vector<double>{1000});
}

}  // namespace retry_test
