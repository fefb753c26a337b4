// choice and multicast through the DSL, in virtual time: the first matching branch runs on the
// exchange itself and the route goes on with the branches' body type; unmatched and halted
// exchanges are dropped with their reason; multicast runs every branch on its own clone,
// concurrently, and the original never waits for them nor fails with them.
#include <catch2/catch.hpp>
#include <rc/rc.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"

namespace choice_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;
using rc::test::in_ms;
using rc::test::rc_error;

namespace {
using ints = std::vector<int>;
}  // namespace

TEST_CASE("choice runs the first matching when() branch only, then the steps after it") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> big, mid, small, after;
  ctx.add(rc::craft()
              .id("c")
              .from(rc::simple(ints{12, 7, 1}))
              .choice(rc::when([](const int& x) { return x > 10; }, rc::branch<int>().to(big)),
                      rc::when([](const int& x) { return x > 5; }, mid), rc::otherwise(small))
              .to(after));
  ctx.start();
  ctx.drain();
  CHECK(big.bodies() == ints{12});  // 12 also matches x > 5: the first match wins
  CHECK(mid.bodies() == ints{7});
  CHECK(small.bodies() == ints{1});
  CHECK(after.bodies() == ints{12, 7, 1});
}

TEST_CASE("every branch ends in the same new body type and the route goes on with it") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  ctx.add(rc::craft()
              .id("c")
              .from(rc::simple(ints{2, 3}))
              .choice(rc::when([](const int& x) { return x % 2 == 0; },
                               [](auto b) {
                                 return std::move(b).transform([](int x) { return "even " + std::to_string(x); });
                               }),
                      rc::otherwise(rc::branch<int>().transform([](int x) { return "odd " + std::to_string(x); })))
              .transform([](std::string s) { return s + "!"; })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<std::string>{"even 2!", "odd 3!"});
}

TEST_CASE("no matching branch and no otherwise drops the exchange as unmatched") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<int> taken, after;
  ctx.add(rc::craft()
              .id("c")
              .from(rc::simple(ints{1, 20}))
              .choice(rc::when([](const int& x) { return x > 10; }, taken))
              .to(after));
  ctx.start();
  ctx.drain();
  CHECK(taken.bodies() == ints{20});
  CHECK(after.bodies() == ints{20});
  const auto dropped = events.named("route:exchange:dropped");
  REQUIRE(dropped.size() == 1);
  CHECK(dropped[0].details["reason"] == "unmatched");
  const auto unmatched = events.named("route:operation:choice:unmatched");
  REQUIRE(unmatched.size() == 1);
  CHECK(unmatched[0].details["exchangeId"] == dropped[0].details["exchangeId"]);
  CHECK(unmatched[0].details["routeId"] == "c");
  CHECK(unmatched[0].details.contains("correlationId"));
  CHECK(events.count("route:operation:choice:matched") == 1);
}

TEST_CASE("halt() in a branch drops the exchange as halted and nothing after it runs") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:dropped");
  rc::spy<int> before_halt, after;
  ctx.add(rc::craft()
              .id("c")
              .from(rc::simple(ints{-1, 4}))
              .choice(rc::when([](const int& x) { return x < 0; }, rc::branch<int>().to(before_halt).halt()),
                      rc::otherwise(rc::branch<int>().transform([](int x) { return x * 10; })))
              .to(after));
  ctx.start();
  ctx.drain();
  CHECK(before_halt.bodies() == ints{-1});
  CHECK(after.bodies() == ints{40});
  REQUIRE(events.count("route:exchange:dropped") == 1);
  CHECK(events.all()[0].details["reason"] == "halted");
}

TEST_CASE("a throwing choice predicate fails the exchange with RC5001 and runs no branch") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:failed");
  rc::spy<int> other, after;
  ctx.add(rc::craft()
              .id("c")
              .from(rc::simple(ints{1, 2}))
              .choice(rc::when(
                          [](const int& x) -> bool {
                            if (x == 1) throw std::runtime_error("bad input");
                            return false;
                          },
                          rc::branch<int>()),
                      rc::otherwise(other))
              .to(after));
  ctx.start();
  ctx.drain();
  CHECK(other.bodies() == ints{2});
  CHECK(after.bodies() == ints{2});
  REQUIRE(events.count("route:exchange:failed") == 1);
  const auto err = events.all()[0].details["error"];
  CHECK(err["code"] == "RC5001");
  CHECK(err["message"].get<std::string>().find("Choice predicate threw: bad input") != std::string::npos);
}

TEST_CASE("a branch step that fails fails the exchange, once, and the next exchange still runs") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<int> after;
  ctx.add(rc::craft()
              .id("c")
              .from(rc::simple(ints{1, 2}))
              .choice(rc::when([](const int& x) { return x == 1; }, rc::branch<int>().transform([](int) -> int {
                        throw std::runtime_error("branch broke");
                      })),
                      rc::otherwise(rc::branch<int>()))
              .to(after));
  ctx.start();
  ctx.drain();
  CHECK(after.bodies() == ints{2});
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].details["error"]["message"] == "branch broke");
  CHECK(events.count("route:step:error") == 1);  // reported by the branch's run, not again by the choice
}

TEST_CASE("choice:matched carries the route, the exchange, the branch index and its label") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("c")
              .from(rc::simple(ints{1, 5, 9}))
              .choice(rc::when([](const int& x) { return x == 1; }, rc::branch<int>()),
                      rc::when([](const int& x) { return x == 5; }, rc::branch<int>(), "five"),
                      rc::otherwise(rc::branch<int>()))
              .to(rc::noop()));
  ctx.start();
  ctx.drain();
  const auto matched = events.named("route:operation:choice:matched");
  const auto started = events.named("route:exchange:started");
  REQUIRE(matched.size() == 3);
  REQUIRE(started.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(matched[i].details["routeId"] == "c");
    CHECK(matched[i].details["exchangeId"] == started[i].details["exchangeId"]);
    CHECK(matched[i].details["correlationId"] == started[i].details["correlationId"]);
    CHECK(matched[i].details["branchIndex"] == i);
  }
  CHECK(matched[0].details["branchLabel"] == "when#1");
  CHECK(matched[1].details["branchLabel"] == "five");
  CHECK(matched[2].details["branchLabel"] == "otherwise");
  // The choice gets one step pair around selection and branch; its steps get their own.
  CHECK(events.count("route:step:completed") == 6);
}

TEST_CASE("a predicate may take the exchange too and choose by header") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> vip, rest;
  ctx.add(
      rc::craft()
          .id("c")
          .from(rc::simple(ints{1, 2}))
          .header("tier", [](const rc::exchange& ex) { return ex.body<int>() == 2 ? "gold" : "basic"; })
          .choice(rc::when([](const int&, const rc::exchange& ex) { return ex.header_or("tier", "") == "gold"; }, vip),
                  rc::otherwise(rest)));
  ctx.start();
  ctx.drain();
  CHECK(vip.bodies() == ints{2});
  CHECK(rest.bodies() == ints{1});
}

TEST_CASE("a branch that waits makes the choice wait: the steps after it run when the branch is done") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> after;
  ctx.add(rc::craft()
              .id("c")
              .from(rc::simple(ints{1, 2}))
              .choice(rc::when([](const int& x) { return x == 1; }, rc::branch<int>().delay(100ms).to(rc::noop())),
                      rc::otherwise(rc::branch<int>()))
              .to(after));
  ctx.start();
  ctx.drain();
  CHECK(after.bodies() == ints{2, 1});
  CHECK(in_ms(after.times()) == std::vector<double>{0, 100});
}

TEST_CASE("a wrapper before choice covers the selection only: retry re-runs predicates, never the branch") {
  rc::context ctx(rc::virtual_time);
  event_recorder failed(ctx, "route:exchange:failed");
  int predicate_calls = 0;
  int branch_calls = 0;
  rc::spy<int> after;
  ctx.add(rc::craft()
              .id("c")
              .from(rc::simple(ints{1}))
              .retry({.max_attempts = 3, .backoff = 10ms})
              .choice(rc::when(
                  [&](const int&) -> bool {
                    if (++predicate_calls < 3) throw std::runtime_error("flaky lookup");
                    return true;
                  },
                  rc::branch<int>().process([&](rc::exchange&) {
                    ++branch_calls;
                    throw std::runtime_error("branch broke");
                  })))
              .to(after));
  ctx.start();
  ctx.drain();
  CHECK(predicate_calls == 3);  // two failed selections retried
  CHECK(branch_calls == 1);     // the branch's failure is outside the retry
  CHECK(after.count() == 0);
  REQUIRE(failed.count("route:exchange:failed") == 1);
  CHECK(failed.all()[0].details["error"]["message"] == "branch broke");
}

TEST_CASE("a wrapper at the end of a branch wraps nothing: RC2001 when the route is built") {
  auto build = [] {
    return rc::craft()
        .id("c")
        .from(rc::simple(1))
        .choice(rc::otherwise(rc::branch<int>().to(rc::noop()).retry()))
        .build();
  };
  CHECK_THROWS_MATCHES(build(), rc::error, rc_error(rc::errc::invalid_dsl, "retry() has no step after it"));
}

TEST_CASE("choice inside a split runs per child and the aggregate sees the branches' type") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::vector<std::string>> out;
  ctx.add(rc::craft()
              .id("c")
              .from(rc::simple(ints{3}))
              .transform([](int n) {
                return ints{n, n + 1};
              })
              .split()
              .choice(rc::when([](const int& x) { return x % 2 == 0; },
                               rc::branch<int>().transform([](int) { return std::string("even"); })),
                      rc::otherwise(rc::branch<int>().transform([](int) { return std::string("odd"); })))
              .aggregate()
              .to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(out.count() == 1);
  CHECK(out.bodies()[0] == std::vector<std::string>{"odd", "even"});
}

// ---- multicast ----------------------------------------------------------------------------------

TEST_CASE("multicast runs each branch on its own clone: fresh id, same correlation, headers copied") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:started");
  rc::spy<int> a, b, original;
  ctx.add(rc::craft()
              .id("m")
              .from(rc::simple(7))
              .header("tenant", "acme")
              .multicast(rc::branch<int>().transform([](int x) { return x * 100; }).to(a), b)
              .to(original));
  ctx.start();
  ctx.drain();
  REQUIRE(a.count() == 1);
  REQUIRE(b.count() == 1);
  REQUIRE(original.count() == 1);
  CHECK(a.bodies() == ints{700});
  CHECK(b.bodies() == ints{7});
  CHECK(original.bodies() == ints{7});  // the clone's change is the clone's
  const auto started = events.all();
  REQUIRE(started.size() == 3);  // the original, then its two clones
  std::set<std::string> ids;
  for (const auto& e : started) {
    ids.insert(e.details["exchangeId"].get<std::string>());
    CHECK(e.details["correlationId"] == started[0].details["correlationId"]);
  }
  CHECK(ids.size() == 3);
  CHECK(a.received()[0].exchange_id != original.received()[0].exchange_id);
  REQUIRE(a.received()[0].headers.find("tenant") != nullptr);
  CHECK(*a.received()[0].headers.find("tenant") == "acme");
}

TEST_CASE("a failing multicast branch fails its clone only: siblings and the original complete") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<int> ok, original;
  ctx.add(rc::craft()
              .id("m")
              .from(rc::simple(1))
              .multicast(rc::branch<int>().transform([](int) -> int { throw std::runtime_error("branch broke"); }),
                         rc::branch<int>().halt(), ok)
              .to(original));
  ctx.start();
  ctx.drain();
  CHECK(ok.count() == 1);
  CHECK(original.count() == 1);
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].details["exchangeId"] != original.received()[0].exchange_id);
  CHECK(failed[0].details["error"]["message"] == "branch broke");
  const auto dropped = events.named("route:exchange:dropped");
  REQUIRE(dropped.size() == 1);
  CHECK(dropped[0].details["reason"] == "halted");
  const auto completed = events.named("route:exchange:completed");
  REQUIRE(completed.size() == 2);  // the original and the "ok" clone
}

TEST_CASE("multicast branches run concurrently and the original does not wait for them") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> a, b, c, original;
  ctx.add(rc::craft()
              .id("m")
              .from(rc::simple(1))
              .multicast(rc::branch<int>().delay(100ms).to(a), rc::branch<int>().delay(100ms).to(b),
                         rc::branch<int>().delay(150ms).to(c))
              .to(original));
  ctx.start();
  ctx.drain();  // waits for the branches too
  CHECK(in_ms(original.times()) == std::vector<double>{0});
  CHECK(in_ms(a.times()) == std::vector<double>{100});  // overlapped, not 100 + 100 + 150
  CHECK(in_ms(b.times()) == std::vector<double>{100});
  CHECK(in_ms(c.times()) == std::vector<double>{150});
}

TEST_CASE("stop() waits for multicast branches in flight: no clone is lost") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<int> a, b, original;
  ctx.add(rc::craft()
              .id("m")
              .from(rc::simple(ints{1, 2, 3}))
              .multicast(rc::branch<int>().delay(100ms).to(a), rc::branch<int>().delay(300ms).to(b))
              .to(original));
  ctx.start();
  ctx.advance(50ms);
  CHECK(original.count() == 3);
  CHECK(a.count() == 0);
  const rc::stop_result result = ctx.stop();
  CHECK_FALSE(result.forced);
  CHECK(a.count() == 3);
  CHECK(b.count() == 3);
  CHECK(events.count("route:exchange:completed") == 9);
  CHECK(events.count("route:exchange:failed") == 0);
  CHECK(events.count("route:exchange:dropped") == 0);
}

}  // namespace choice_test
