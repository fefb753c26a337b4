// error(handler) through the DSL, both scopes, in virtual time.
#include <catch2/catch.hpp>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>

#include "support/dsl_support.hpp"

namespace error_handler_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;
using rc::test::rc_error;

namespace {

std::string error_code(const rc::test::recorded_event& e) { return e.details["error"]["code"].get<std::string>(); }

/// A step that always throws `what`.
struct boom {
  std::string what = "boom";
  void operator()(int&) const { throw std::runtime_error(what); }
};

}  // namespace

// ---- step scope -----------------------------------------------------------------------------

TEST_CASE("error, step scope: a recovery body becomes the body and the pipeline goes on") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .error([](const rc::error&, rc::exchange&) -> rc::recovery { return 42; })
              .to(boom{})
              .transform([](int v) { return v + 1; })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{43});
  CHECK(events.names("route:error-handler:") ==
        std::vector<std::string>{"route:error-handler:invoked", "route:error-handler:recovered"});
  const auto invoked = events.named("route:error-handler:invoked")[0].details;
  CHECK(invoked["originalError"]["code"] == "RC5001");
  CHECK(invoked["originalError"]["message"] == "boom");
  CHECK(invoked["failedOperation"] == "to");
  CHECK(invoked["scope"] == "step");
  CHECK(invoked["stepLabel"] == "to");
  CHECK(invoked.contains("routeId"));
  CHECK(invoked.contains("exchangeId"));
  CHECK(invoked.contains("correlationId"));
  const auto recovered = events.named("route:error-handler:recovered")[0].details;
  CHECK(recovered["recoveryStrategy"] == "step-error-handler");
  CHECK(recovered["scope"] == "step");
  CHECK(recovered["stepLabel"] == "to");
  // A recovered step failure is no step error, no caught (that is route scope), no failure.
  CHECK(events.count("route:step:error") == 0);
  CHECK(events.count("route:error:caught") == 0);
  CHECK(events.count("route:exchange:completed") == 1);
}

TEST_CASE("error: the handler sees an rc::error, plain exceptions normalised to RC5001, codes kept") {
  rc::context ctx(rc::virtual_time);
  std::vector<std::string> seen;
  auto handler = [&](const rc::error& e, rc::exchange&) -> rc::recovery {
    seen.push_back(e.code_string() + ":" + e.message() + ":" + (e.retryable() ? "r" : "n"));
    return 0;
  };
  ctx.add(rc::craft().id("a").from(rc::simple(1)).error(handler).to(boom{"plain"}));
  ctx.add(rc::craft().id("b").from(rc::simple(1)).error(handler).to([](int&) {
    throw rc::error(rc::errc::validation, "bad");
  }));
  ctx.start();
  ctx.drain();
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<std::string>{"RC5001:plain:r", "RC5002:bad:n"});
}

TEST_CASE("error, step scope: a body of another type (string) through a string-typed step") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .error([](const rc::error&, rc::exchange&) -> rc::recovery { return "fallback"; })
              .transform([](int) -> std::string { throw std::runtime_error("no"); })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<std::string>{"fallback"});
}

TEST_CASE("error, step scope: a throw emits failed and the exchange fails through the default path") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .error([](const rc::error&, rc::exchange&) -> rc::recovery { throw std::runtime_error("handler broke"); })
              .to(boom{})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.count() == 0);
  CHECK(events.names("route:error-handler:") ==
        std::vector<std::string>{"route:error-handler:invoked", "route:error-handler:failed"});
  const auto failed = events.named("route:error-handler:failed")[0].details;
  CHECK(failed["error"]["message"] == "handler broke");
  CHECK(failed["originalError"]["message"] == "boom");
  const auto ex_failed = events.named("route:exchange:failed");
  REQUIRE(ex_failed.size() == 1);
  CHECK(error_code(ex_failed[0]) == "RC5001");
  CHECK(ex_failed[0].details["error"]["message"] == "handler broke");
  CHECK(events.count("route:step:error") == 1);
  CHECK(events.count("route:error") == 1);
}

TEST_CASE("error, step scope: rethrow() passes the original failure on") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .error([](const rc::error&, rc::exchange&) { return rc::recovery::rethrow(); })
              .to([](int&) { throw rc::error(rc::errc::connection_failed, "down"); }));
  ctx.start();
  ctx.drain();
  const auto failed = events.named("route:error-handler:failed");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].details["rethrown"] == true);
  const auto ex_failed = events.named("route:exchange:failed");
  REQUIRE(ex_failed.size() == 1);
  CHECK(error_code(ex_failed[0]) == "RC5010");
}

TEST_CASE("error, step scope: drop(reason) gives recovered and dropped") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .error([](const rc::error&, rc::exchange&) { return rc::recovery::drop("poison"); })
              .to(boom{})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.count() == 0);
  CHECK(events.count("route:error-handler:recovered") == 1);
  const auto dropped = events.named("route:exchange:dropped");
  REQUIRE(dropped.size() == 1);
  CHECK(dropped[0].details["reason"] == "poison");
}

TEST_CASE("error(h1).error(h2).to(d): h2 runs first and h1 sees its rethrow") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  std::vector<std::string> order;
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .error([&](const rc::error& e, rc::exchange&) -> rc::recovery {
                order.push_back("h1 saw " + e.message());
                return 7;
              })
              .error([&](const rc::error& e, rc::exchange&) -> rc::recovery {
                order.push_back("h2 saw " + e.message());
                throw rc::error(rc::errc::validation, "from h2");
              })
              .to(boom{})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(order == std::vector<std::string>{"h2 saw boom", "h1 saw from h2"});
  CHECK(out.bodies() == std::vector<int>{7});
}

TEST_CASE("error, step scope: a coroutine handler (rc::task<rc::recovery>) works like a plain one") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .error([](const rc::error&, rc::exchange&) -> rc::task<rc::recovery> { co_return 9; })
              .to(boom{})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{9});
}

TEST_CASE("error, step scope wrapping retry: the handler sees the exhausted retry's last error once") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  int calls = 0, handled = 0;
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .error([&](const rc::error&, rc::exchange&) -> rc::recovery {
                ++handled;
                return -1;
              })
              .retry({.max_attempts = 3, .backoff = 1ms})
              .to([&](int&) {
                ++calls;
                throw std::runtime_error("x");
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(calls == 3);
  CHECK(handled == 1);
  CHECK(out.bodies() == std::vector<int>{-1});
}

// ---- route scope ----------------------------------------------------------------------------

TEST_CASE("error, route scope: a recovery body ends the run successfully (step:error, invoked, caught, recovered)") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  rc::spy<int> after;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .error([](const rc::error&, rc::exchange&) -> rc::recovery { return 5; })
              .from(rc::simple(1))
              .to(boom{})
              .to(after));
  ctx.start();
  ctx.drain();
  CHECK(after.count() == 0);  // the run ends at the handler
  auto names = events.names("route:");
  std::vector<std::string> tail;
  for (const auto& n : names)
    if (n == "route:step:error" || n.rfind("route:error", 0) == 0 || n.rfind("route:exchange:", 0) == 0)
      tail.push_back(n);
  CHECK(tail == std::vector<std::string>{"route:exchange:started", "route:step:error", "route:error-handler:invoked",
                                         "route:error:caught", "route:error-handler:recovered",
                                         "route:exchange:completed"});
  CHECK(events.count("context:error") == 0);
  CHECK(events.count("route:error") == 0);
  const auto recovered = events.named("route:error-handler:recovered")[0].details;
  CHECK(recovered["recoveryStrategy"] == "route-error-handler");
  CHECK(recovered["scope"] == "route");
  const auto invoked = events.named("route:error-handler:invoked")[0].details;
  CHECK(invoked["failedOperation"] == "to");
  CHECK(invoked["scope"] == "route");
  const auto completed = events.named("route:exchange:completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0].details["exchange"]["body"] == 5);
  const auto caught = events.named("route:error:caught")[0].details;
  CHECK(caught["routeId"] == "r");
  CHECK(caught["error"]["code"] == "RC5001");
}

TEST_CASE("error, route scope: rethrow gives failed, route:error, context:error, exchange:failed with the original") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .error([](const rc::error&, rc::exchange&) { return rc::recovery::rethrow(); })
              .from(rc::simple(1))
              .to([](int&) { throw rc::error(rc::errc::connection_failed, "down"); }));
  ctx.start();
  ctx.drain();
  CHECK(events.count("route:error-handler:failed") == 1);
  CHECK(events.count("route:error:caught") == 0);
  CHECK(events.count("route:error") == 1);
  CHECK(events.count("context:error") == 1);
  CHECK(events.count("route:step:error") == 1);  // the original, reported once
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 1);
  CHECK(error_code(failed[0]) == "RC5010");
}

TEST_CASE("error, route scope: a handler that throws fails the run with its error (RC5001 unless coded)") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("plain")
              .error([](const rc::error&, rc::exchange&) -> rc::recovery { throw std::runtime_error("oops"); })
              .from(rc::simple(1))
              .to(boom{}));
  ctx.add(
      rc::craft()
          .id("coded")
          .error([](const rc::error&, rc::exchange&) -> rc::recovery { throw rc::error(rc::errc::validation, "nope"); })
          .from(rc::simple(1))
          .to(boom{}));
  ctx.start();
  ctx.drain();
  std::map<std::string, std::string> codes;
  for (const auto& f : events.named("route:exchange:failed"))
    codes[f.details["routeId"]] = error_code(f) + " " + f.details["error"]["message"].get<std::string>();
  CHECK(codes["plain"] == "RC5001 oops");
  CHECK(codes["coded"] == "RC5002 nope");
  CHECK(events.count("route:error-handler:failed") == 2);
  CHECK(events.count("route:step:error") == 2);  // the originals only
}

TEST_CASE("error, route scope: drop gives caught, recovered and exchange:dropped (default reason)") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .error([](const rc::error&, rc::exchange&) { return rc::recovery::drop(); })
              .from(rc::simple(1))
              .to(boom{}));
  ctx.start();
  ctx.drain();
  CHECK(events.count("route:error:caught") == 1);
  CHECK(events.count("route:error-handler:recovered") == 1);
  const auto dropped = events.named("route:exchange:dropped");
  REQUIRE(dropped.size() == 1);
  CHECK(dropped[0].details["reason"] == "error-handler-drop");
  CHECK(events.count("route:exchange:failed") == 0);
}

TEST_CASE("error, route scope: a second error() before from() replaces the first") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  std::vector<int> used;
  ctx.add(rc::craft()
              .id("r")
              .error([&](const rc::error&, rc::exchange&) -> rc::recovery {
                used.push_back(1);
                return 1;
              })
              .error([&](const rc::error&, rc::exchange&) -> rc::recovery {
                used.push_back(2);
                return 2;
              })
              .from(rc::simple(1))
              .to(boom{}));
  ctx.start();
  ctx.drain();
  CHECK(used == std::vector<int>{2});
}

TEST_CASE("error, route scope: catches a throttle refusal (RC5013) like any other error") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  std::vector<std::string> seen;
  ctx.add(rc::craft()
              .id("r")
              .throttle({.rate = 1, .mode = rc::throttle_mode::reject})
              .error([&](const rc::error& e, rc::exchange&) -> rc::recovery {
                seen.push_back(e.code_string());
                return -1;
              })
              .from(rc::simple(std::vector<int>{1, 2}))
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(seen == std::vector<std::string>{"RC5013"});
  CHECK(out.bodies() == std::vector<int>{1});  // the refused one ended at the handler
}

TEST_CASE("error, route scope: catches a timeout (RC5011) and an open breaker (RC5025)") {
  rc::context ctx(rc::virtual_time);
  std::vector<std::string> seen;
  auto handler = [&](const rc::error& e, rc::exchange&) -> rc::recovery {
    seen.push_back(e.code_string());
    return 0;
  };
  ctx.add(rc::craft().id("t").error(handler).from(rc::simple(1)).to([](int&) {
    throw rc::error(rc::errc::timed_out, "too slow");
  }));
  ctx.add(rc::craft()
              .id("b")
              .error(handler)
              .circuit_breaker({.failure_threshold = 1})
              .from(rc::simple(std::vector<int>{1, 2}))
              .to(boom{}));
  ctx.start();
  ctx.drain();
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<std::string>{"RC5001", "RC5011", "RC5025"});
}

// ---- forward (dead letter) --------------------------------------------------------------------

TEST_CASE("error: forward() sends the failed exchange to a direct route with the error in headers") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> dead;
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("dlq").from(rc::direct<int>("dlq")).to(dead).transform([](int v) { return v * 100; }));
  ctx.add(rc::craft()
              .id("main")
              .from(rc::simple(3))
              .error([](const rc::error&, rc::exchange&) { return rc::recovery::forward(rc::direct<int>("dlq")); })
              .to(boom{"kaput"})
              .to(out));
  ctx.start();
  ctx.drain();
  const auto got = dead.received();
  REQUIRE(got.size() == 1);
  CHECK(got[0].body == 3);
  CHECK(got[0].headers.find("routecraft.error.code")->get<std::string>() == "RC5001");
  CHECK(got[0].headers.find("routecraft.error.message")->get<std::string>() == "kaput");
  CHECK(got[0].headers.find("routecraft.error.operation")->get<std::string>() == "to");
  CHECK(got[0].headers.find("routecraft.error.route")->get<std::string>() == "main");
  CHECK(out.bodies() == std::vector<int>{300});  // the dead-letter route's reply
  CHECK(out.received()[0].headers.find("routecraft.error.code") == nullptr);
  const auto recovered = events.named("route:error-handler:recovered");
  REQUIRE(recovered.size() == 1);
  CHECK(recovered[0].details["forwardedTo"] == "direct:dlq");
}

TEST_CASE("error: forward() to a route that drops fails with RC5031") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  ctx.add(rc::craft().id("dlq").from(rc::direct<int>("dlq")).filter([](const int&) { return false; }));
  ctx.add(rc::craft()
              .id("main")
              .error([](const rc::error&, rc::exchange&) { return rc::recovery::forward(rc::direct<int>("dlq")); })
              .from(rc::simple(3))
              .to(boom{}));
  ctx.start();
  ctx.drain();
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].details["routeId"] == "main");
  CHECK(error_code(failed[0]) == "RC5031");
  CHECK(events.count("route:error-handler:failed") == 1);
}

// ---- options ------------------------------------------------------------------------------------

TEST_CASE("error: an empty handler is RC5003 at the call, naming the option") {
  using handler_fn = std::function<rc::recovery(const rc::error&, rc::exchange&)>;
  CHECK_THROWS_MATCHES(rc::craft().error(handler_fn{}), rc::error, rc_error(rc::errc::misconfigured, "handler"));
  CHECK_THROWS_MATCHES(rc::craft().from(rc::simple(1)).error(handler_fn{}), rc::error,
                       rc_error(rc::errc::misconfigured, "error({ handler })"));
}

TEST_CASE("error: a recovery body of another type than the step produces is RC5003, never a misread body") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("step")
              .from(rc::simple(1))
              .error([](const rc::error&, rc::exchange&) -> rc::recovery { return 42; })  // an int, not a string
              .transform([](int) -> std::string { throw std::runtime_error("no"); })
              .to(out));
  ctx.add(rc::craft()
              .id("route")
              .error([](const rc::error&, rc::exchange&) -> rc::recovery { return 42; })
              .from(rc::simple(1))
              .transform([](int) -> std::string { throw std::runtime_error("no"); })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.count() == 0);
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 2);
  for (const auto& f : failed) {
    CHECK(error_code(f) == "RC5003");
    CHECK_THAT(f.details["error"]["message"].get<std::string>(),
               Catch::Contains("the recovery body is a int, but the step it replaces produces a std::"));
  }
  CHECK(events.count("route:error-handler:failed") == 2);
}

}  // namespace error_handler_test
