// The test kit (<rc/testing.hpp>) itself: the run-until helpers and their safety limit, error
// capture, the spy's three roles, the mock's replies, errors, latency and records, and endpoint
// overrides.
#include <algorithm>
#include <catch2/catch.hpp>
#include <rc/rc.hpp>
#include <rc/testing.hpp>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"

namespace testing_test {

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using rc::test::in_ms;
using rc::test::rc_error;

namespace {
using ms = std::chrono::milliseconds;

rc::time_point at_ms(long long n) { return rc::time_point{} + ms(n); }
}  // namespace

// ---- test context ------------------------------------------------------------------------------

TEST_CASE("test_context: run_until_completed stops once n exchanges have ended, at that time") {
  rc::testing::test_context tc;
  rc::spy<int> out;
  tc.add(rc::craft().id("r").from(rc::test::arrivals({0ms, 100ms, 200ms, 300ms})).to(out));
  tc.start_and_wait_ready();
  tc.run_until_completed(2);
  CHECK(out.bodies() == std::vector<int>{0, 1});
  CHECK(tc.now() == at_ms(100));
  tc.run_until_completed(4);
  CHECK(out.count() == 4);
  CHECK(tc.now() == at_ms(300));
  CHECK(tc.exchanges().completed == 4);
}

TEST_CASE("test_context: run_until_completed counts failed and dropped exchanges as ended") {
  rc::testing::test_context tc;
  tc.add(rc::craft()
             .id("r")
             .from(rc::simple(std::vector<int>{1, 2, 3}))
             .filter([](int n) { return n != 2; })
             .to([](int n) {
               if (n == 3) throw std::runtime_error("three");
             }));
  tc.start_and_wait_ready();
  tc.run_until_completed(3);
  const auto c = tc.exchanges();
  CHECK(c.completed == 1);
  CHECK(c.dropped == 1);
  CHECK(c.failed == 1);
  CHECK(c.ended() == 3);
}

TEST_CASE("test_context: run_until_completed fails with a clear message when nothing is left to run") {
  rc::testing::test_context tc;
  tc.add(rc::craft().id("r").from(rc::simple(std::vector<int>{1, 2})).to(rc::noop()));
  tc.start_and_wait_ready();
  CHECK_THROWS_WITH(tc.run_until_completed(3), Contains("run_until_completed(3): nothing is left to run") &&
                                                   Contains("exchanges ended so far: 2 (2 completed"));
}

TEST_CASE("test_context: the run-until helpers give up at the virtual-time limit instead of hanging") {
  // An endless timer never goes idle and never ends 1000 exchanges within a minute.
  rc::testing::test_context tc({.limit = 60s});
  rc::spy<rc::tick> ticks;
  tc.add(rc::craft().id("tick").from(rc::timer({.interval = 10s})).to(ticks));
  tc.start_and_wait_ready();
  CHECK_THROWS_AS(tc.run_until_idle(), rc::testing::run_limit_error);
  CHECK(tc.now() <= at_ms(60'000));
  const std::size_t before = ticks.count();
  CHECK(before == 7);  // t = 0, 10 .. 60 s
  CHECK_THROWS_WITH(tc.run_until_completed(1000), Contains("run_until_completed(1000): gave up") &&
                                                      Contains("limit of 60s") && Contains("test_options::limit"));
  CHECK(tc.now() <= at_ms(120'000));
}

TEST_CASE("test_context: run_until_idle returns when nothing waits any more") {
  rc::testing::test_context tc;
  rc::spy<int> out;
  tc.add(rc::craft().id("r").from(rc::simple(std::vector<int>{1, 2})).delay(2s).to(out));
  tc.start_and_wait_ready();
  CHECK(out.count() == 0);
  tc.run_until_idle();
  CHECK(out.count() == 2);
  CHECK(tc.now() == at_ms(2000));
}

TEST_CASE("test_context: run_until_idle is not held up by a direct source serving its name") {
  rc::testing::test_context tc;
  rc::spy<int> out;
  tc.add(rc::craft().id("served").from(rc::direct<int>("double")).transform([](int n) { return n * 2; }));
  tc.add(rc::craft()
             .id("caller")
             .from(rc::simple(std::vector<int>{1, 2}))
             .delay(1s)
             .request<int>(rc::direct<int>("double"))
             .to(out));
  tc.start_and_wait_ready();
  tc.run_until_idle();
  CHECK(out.bodies() == std::vector<int>{2, 4});
  CHECK(tc.now() == at_ms(1000));  // not the end of time
}

TEST_CASE("test_context: a limit of zero is RC5003") {
  CHECK_THROWS_MATCHES(rc::testing::test_context({.limit = 0s}), rc::error, rc_error(rc::errc::misconfigured, "limit"));
}

TEST_CASE("test_context: test() starts, drains and stops") {
  rc::testing::test_context tc;
  rc::spy<int> out;
  tc.add(rc::craft().id("r").from(rc::simple(std::vector<int>{1, 2, 3})).delay(1s).to(out));
  const rc::stop_result r = tc.test();
  CHECK_FALSE(r.forced);
  CHECK(out.count() == 3);
  CHECK(tc.now() == at_ms(1000));
}

TEST_CASE("test_context: errors() captures every context:error with its code and route") {
  rc::testing::test_context tc;
  tc.add(rc::craft()
             .id("r")
             .from(rc::simple(std::vector<int>{1, 2}))
             .process([](rc::exchange& ex) {
               if (ex.body<int>() == 1) throw rc::error(rc::errc::connection_failed, "refused");
               throw std::runtime_error("plain");
             })
             .to(rc::noop()));
  tc.test();
  const auto errors = tc.errors();
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].error.code() == rc::errc::connection_failed);
  CHECK(errors[0].error.message() == "refused");
  CHECK(errors[0].route == "r");
  CHECK(errors[1].error.code() == rc::errc::step_failed);  // a plain exception is RC5001
  CHECK(errors[1].error.message() == "plain");
}

TEST_CASE("test_context: a context:error without a code of ours is captured as RC9901") {
  rc::testing::test_context tc;
  tc.ctx().events().emit(rc::event_id::context_error, [] { return nlohmann::json{{"error", "disk on fire"}}; });
  tc.ctx().events().emit(rc::event_id::context_error, [] {
    return nlohmann::json{{"error", {{"code", "E42"}, {"message", "odd"}}}};
  });
  const auto errors = tc.errors();
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].error.code() == rc::errc::unknown);
  CHECK(errors[0].error.code_string() == "RC9901");
  CHECK(errors[0].error.message() == "disk on fire");
  CHECK(errors[1].error.code() == rc::errc::unknown);
  CHECK(errors[1].error.message() == "odd");
}

TEST_CASE("test_context: a handler that throws is captured too") {
  rc::testing::test_context tc;
  auto sub = tc.ctx().on("route:exchange:completed", [](const rc::event&) { throw std::runtime_error("bad handler"); });
  tc.add(rc::craft().id("r").from(rc::simple(1)).to(rc::noop()));
  tc.test();
  REQUIRE(tc.errors().size() == 1);
  CHECK(tc.errors()[0].error.message() == "bad handler");
  CHECK(tc.errors()[0].payload["event"] == "route:exchange:completed");
}

// ---- spy ---------------------------------------------------------------------------------------

TEST_CASE("spy: destination, enricher and processor, each counted") {
  rc::testing::test_context tc;
  rc::spy<int> s;
  tc.add(rc::craft()
             .id("r")
             .from(rc::simple(std::vector<int>{1, 2}))
             .process(s)
             .delay(10ms)
             .request<int>(s)
             .transform([](int n) { return n * 10; })
             .to(s));
  tc.test();
  CHECK(s.calls() == rc::spy_calls{.send = 2, .enrich = 2, .process = 2});
  CHECK(s.count() == 6);
  // Both pass the processor at 0; after the delay each is enriched (body unchanged), then sent.
  CHECK(s.bodies() == std::vector<int>{1, 2, 1, 10, 2, 20});
  CHECK(in_ms(s.times()) == std::vector<double>{0, 0, 10, 10, 10, 10});
  CHECK(s.last().body == 20);
  CHECK(s.last().used_as == rc::spy<int>::role::send);
  CHECK(s.received()[0].used_as == rc::spy<int>::role::process);
  CHECK(s.received()[2].used_as == rc::spy<int>::role::enrich);
  s.reset();
  CHECK(s.count() == 0);
  CHECK(s.calls() == rc::spy_calls{});
  CHECK_THROWS_MATCHES(s.last(), rc::error, rc_error(rc::errc::validation, "received nothing"));
}

// ---- mock --------------------------------------------------------------------------------------

TEST_CASE("mock: replies with a value, a function of the request, one-offs first, and records calls") {
  rc::testing::test_context tc;
  rc::testing::mock<std::string> m;
  m.reply([](const rc::exchange& ex) {
     return std::string("n").append(std::to_string(ex.body<int>()));
   }).reply_once("first");
  rc::spy<std::string> out;
  tc.add(rc::craft().id("r").from(rc::sequence(std::vector<int>{1, 2, 3})).request<std::string>(m).to(out));
  tc.test();
  CHECK(out.bodies() == std::vector<std::string>{"first", "n2", "n3"});
  REQUIRE(m.count() == 3);
  CHECK(m.calls()[1].body<int>() == 2);
  CHECK(m.calls()[1].enrich);
  CHECK(m.roles() == rc::spy_calls{.send = 0, .enrich = 3, .process = 0});
  CHECK(m.last().body<int>() == 3);
  m.reset();
  CHECK(m.count() == 0);
}

TEST_CASE("mock: latency is virtual time, calls and replies are timed") {
  rc::testing::test_context tc;
  rc::testing::mock<int> m;
  m.latency(250ms).reply(7);
  rc::spy<int> out;
  tc.add(rc::craft().id("r").from(rc::sequence(std::vector<int>{1, 2})).request<int>(m).to(out));
  tc.test();
  CHECK(in_ms(m.call_times()) == std::vector<double>{0, 250});
  CHECK(in_ms(m.reply_times()) == std::vector<double>{250, 500});
  CHECK(out.bodies() == std::vector<int>{7, 7});
  CHECK(in_ms(out.times()) == std::vector<double>{250, 500});
}

TEST_CASE("mock: errors fail the call with their code, fail_call picks one call") {
  rc::testing::test_context tc;
  rc::testing::mock<int> m;
  m.reply(1).fail_call(2, rc::error(rc::errc::connection_failed, "connection refused"));
  tc.add(rc::craft().id("r").from(rc::sequence(std::vector<int>{1, 2, 3})).request<int>(m).to(rc::noop()));
  tc.test();
  const auto calls = m.calls();
  REQUIRE(calls.size() == 3);
  CHECK_FALSE(calls[0].failure);
  REQUIRE(calls[1].failure);
  CHECK(calls[1].failure->code() == rc::errc::connection_failed);
  CHECK_FALSE(calls[2].failure);
  REQUIRE(tc.errors().size() == 1);
  CHECK(tc.errors()[0].error.code() == rc::errc::connection_failed);
  CHECK(tc.exchanges().failed == 1);
}

TEST_CASE("mock: fail() fails every call, http_error is what rc::http raises for a status") {
  rc::testing::test_context tc;
  rc::testing::mock<rc::http_response> m;
  m.fail(rc::testing::http_error(429, "http://api/x", "POST", 2s));
  tc.add(rc::craft().id("r").from(rc::simple(std::vector<int>{1, 2})).request<rc::http_response>(m).to(rc::noop()));
  tc.test();
  const auto errors = tc.errors();
  REQUIRE(errors.size() == 2);
  const rc::error& e = errors[0].error;
  CHECK(e.code() == rc::errc::step_failed);
  CHECK(e.retryable());
  CHECK(e.message() == "http: POST http://api/x answered 429 Too Many Requests");
  CHECK(e.details()["status"] == 429);
  CHECK(e.details()["retry_after_ms"] == 2000);
  CHECK_FALSE(rc::testing::http_error(404).retryable());
}

TEST_CASE("mock: a call cut short by a timeout fails at the deadline, not after the latency") {
  rc::testing::test_context tc;
  rc::testing::mock<int> m;
  m.latency(5s).reply(1);
  tc.add(rc::craft().id("r").from(rc::simple(1)).timeout(1s).request<int>(m).to(rc::noop()));
  tc.test();
  REQUIRE(m.count() == 1);
  CHECK(tc.now() == at_ms(1000));
  CHECK(m.last().done == at_ms(1000));
  REQUIRE(m.last().failure);
  CHECK(tc.exchanges().failed == 1);
  REQUIRE(tc.errors().size() == 1);
  CHECK(tc.errors()[0].error.code() == rc::errc::timed_out);
}

TEST_CASE("mock: as a destination, it records and the body goes on unchanged") {
  rc::testing::test_context tc;
  rc::testing::mock<int> m;
  m.latency(10ms);
  rc::spy<int> out;
  tc.add(rc::craft().id("r").from(rc::simple(std::vector<int>{4, 5})).to(m).to(out));
  tc.test();
  CHECK(m.roles() == rc::spy_calls{.send = 2, .enrich = 0, .process = 0});
  CHECK(out.bodies() == std::vector<int>{4, 5});
  CHECK(in_ms(out.times()) == std::vector<double>{10, 10});
}

// ---- overrides ---------------------------------------------------------------------------------

TEST_CASE("override by type replaces the endpoint in to, request and tap, inside wrappers too") {
  rc::testing::test_context tc;
  rc::testing::mock<rc::http_response> api;
  api.reply(rc::text_response("ok"));
  tc.override<rc::http_client_endpoint>(api);
  rc::spy<std::string> out;
  tc.add(rc::craft()
             .id("r")
             .from(rc::simple(std::string("x")))
             .to(rc::http({.url = "http://a/send", .method = "POST"}))
             .tap(rc::http({.url = "http://a/audit", .method = "POST"}))
             .retry({.max_attempts = 2})
             .request<rc::http_response>(rc::http({.url = "http://a/get"}))
             .transform([](rc::http_response r) { return r.body; })
             .to(out));
  tc.test();
  CHECK(out.bodies() == std::vector<std::string>{"ok"});
  CHECK(api.roles() == rc::spy_calls{.send = 2, .enrich = 1, .process = 0});
  CHECK(tc.errors().empty());
}

TEST_CASE("override: events still name the replaced adapter") {
  rc::testing::test_context tc;
  rc::testing::mock<rc::http_response> api;
  tc.override<rc::http_client_endpoint>(api);
  rc::test::event_recorder events(tc.ctx(), "route:step:started");
  tc.add(rc::craft()
             .id("r")
             .from(rc::simple(1))
             .request<rc::http_response>(rc::http({.url = "http://a/"}))
             .to(rc::noop()));
  tc.test();
  const auto started = events.named("route:step:started");
  REQUIRE(!started.empty());
  CHECK(started[0].details["adapter"] == "http");
}

TEST_CASE("override with a predicate picks endpoints by their options (here the URL)") {
  rc::testing::test_context tc;
  rc::testing::mock<rc::http_response> billing, stock;
  billing.reply(rc::text_response("billed"));
  stock.reply(rc::text_response("in stock"));
  tc.override<rc::http_client_endpoint>(
      billing, [](const rc::http_client_endpoint& e) { return e.options().url.find("billing") != std::string::npos; });
  tc.override<rc::http_client_endpoint>(stock);  // the rest
  rc::spy<std::string> out;
  tc.add(rc::craft()
             .id("r")
             .from(rc::simple(1))
             .request<rc::http_response>(rc::http({.url = "http://stock/check"}))
             .transform([](rc::http_response r) { return r.body; })
             .to(out)
             .request<rc::http_response>(rc::http({.url = "http://billing/charge"}))
             .transform([](rc::http_response r) { return r.body; })
             .to(out));
  tc.test();
  CHECK(out.bodies() == std::vector<std::string>{"in stock", "billed"});
  CHECK(billing.count() == 1);
  CHECK(stock.count() == 1);
}

TEST_CASE("override by adapter name, with a spy as the double") {
  rc::testing::test_context tc;
  rc::spy<int> logged;
  tc.override("log", logged);
  tc.add(rc::craft().id("r").from(rc::simple(std::vector<int>{1, 2})).to(rc::log("never printed")));
  tc.test();
  CHECK(logged.bodies() == std::vector<int>{1, 2});
  CHECK(logged.calls().send == 2);
}

TEST_CASE("override reaches the endpoints between split() and aggregate()") {
  rc::testing::test_context tc;
  rc::spy<int> logged;
  rc::spy<std::vector<int>> out;
  tc.override("log", logged);
  tc.add(rc::craft()
             .id("r")
             .from(rc::simple(std::vector<std::vector<int>>{{1, 2, 3}}))
             .split()
             .to(rc::log("never printed"))
             .aggregate()
             .to(out));
  tc.test();
  CHECK(logged.bodies() == std::vector<int>{1, 2, 3});
  CHECK(out.bodies() == std::vector<std::vector<int>>{{1, 2, 3}});
}

TEST_CASE("override reaches the endpoints inside choice() and multicast() branches") {
  rc::testing::test_context tc;
  rc::spy<int> logged;
  rc::spy<int> out;
  tc.override("log", logged);
  tc.add(rc::craft()
             .id("r")
             .from(rc::simple(std::vector<int>{1, 2}))
             .choice(rc::when([](const int& x) { return x == 1; }, rc::log("never printed")),
                     rc::otherwise(rc::branch<int>().transform([](int x) { return x * 10; })))
             .multicast(rc::branch<int>().transform([](int x) { return x + 1; }).to(rc::log("never printed")))
             .to(out));
  tc.test();
  CHECK(out.bodies() == std::vector<int>{1, 20});
  auto seen = logged.bodies();
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<int>{1, 2, 21});  // the choice branch's 1, the multicast clones' 2 and 21
}

TEST_CASE("override applies to routes added after it, others keep their endpoints") {
  rc::testing::test_context tc;
  rc::spy<int> before, replaced;
  tc.add(rc::craft().id("a").from(rc::simple(1)).to(before));
  tc.override<rc::spy<int>>(replaced);
  tc.add(rc::craft().id("b").from(rc::simple(2)).to(rc::spy<int>()));
  tc.test();
  CHECK(before.bodies() == std::vector<int>{1});
  CHECK(replaced.bodies() == std::vector<int>{2});
}

}  // namespace testing_test
