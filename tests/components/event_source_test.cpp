// rc::on_event: a source fed by the context's event bus. Filtering by name, pattern and
// predicate; the body; no feeding on its own events; no ping-pong between two event routes; the
// bounded queue's overflow policy and event. Virtual time, but for one run on two real threads.
#include <catch2/catch.hpp>
#include <rc/rc.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/dsl_support.hpp"

namespace event_source_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;
using rc::test::rc_error;

TEST_CASE("an event route alerts on another route's rejected exchanges") {
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::event_message> alerts;
  ctx.add(rc::craft().id("alerts").from(rc::on_event("route:throttle:rejected")).to(alerts));
  ctx.add(rc::craft()
              .id("api")
              .from(rc::simple(std::vector<int>{1, 2, 3}))
              .throttle({.rate = 1, .mode = rc::throttle_mode::reject})
              .to(rc::noop()));
  ctx.start();
  ctx.run_until_idle();
  const auto got = alerts.received();
  REQUIRE(got.size() == 2);
  for (const auto& r : got) {
    CHECK(r.body.name == "route:throttle:rejected");
    CHECK(r.body.details["routeId"] == "api");
    CHECK(!r.body.ts.empty());
    CHECK(*r.headers.find("routecraft.event.name") == "route:throttle:rejected");
    CHECK(*r.headers.find("routecraft.event.depth") == 1);
  }
  ctx.stop();
}

TEST_CASE("an event route added after the routes it watches still sees their first exchanges") {
  // Every event source subscribes when the context starts, before any route's source runs, so
  // the order routes were added in does not decide what an event route sees.
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::event_message> seen;
  ctx.add(rc::craft().id("x").from(rc::simple(std::vector<int>{1, 2, 3})).to(rc::noop()));
  ctx.add(rc::craft().id("w").from(rc::on_event("route:exchange:completed")).to(seen));
  ctx.start();
  ctx.run_until_idle();
  CHECK(seen.count() == 3);
  // Added to the started context: it sees what runs after add() returns.
  rc::spy<rc::event_message> late;
  ctx.add(rc::craft().id("late").from(rc::on_event("route:exchange:completed")).to(late));
  ctx.add(rc::craft().id("y").from(rc::simple(std::vector<int>{4, 5})).to(rc::noop()));
  ctx.run_until_idle();
  CHECK(late.count() == 2);
  ctx.stop();
}

TEST_CASE("on_event filters by pattern and by predicate") {
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::event_message> failed_b;
  ctx.add(rc::craft()
              .id("watch")
              .from(rc::on_event({"route:exchange:*"},
                                 [](const rc::event& e) {
                                   return e.name == "route:exchange:failed" && e.details.value("routeId", "") == "b";
                                 }))
              .to(failed_b));
  const auto boom = [](int) -> int { throw std::runtime_error("boom"); };
  ctx.add(rc::craft().id("a").from(rc::simple(std::vector<int>{1, 2})).transform(boom).to(rc::noop()));
  ctx.add(rc::craft().id("b").from(rc::simple(std::vector<int>{1, 2, 3})).transform(boom).to(rc::noop()));
  ctx.start();
  ctx.run_until_idle();
  CHECK(failed_b.count() == 3);
  ctx.stop();
}

TEST_CASE("an event route never receives its own events") {
  // It listens to every exchange event, its own exchanges' included: without the guard each of
  // its runs would feed it the next one, forever.
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::event_message> seen;
  ctx.add(rc::craft().id("audit").from(rc::on_event("route:exchange:*")).to(seen));
  ctx.add(rc::craft().id("work").from(rc::simple(std::vector<int>{1, 2})).to(rc::noop()));
  ctx.start();
  ctx.run_until_idle();
  // work: 2 started + 2 completed.
  CHECK(seen.count() == 4);
  for (const auto& b : seen.bodies()) CHECK(b.details["routeId"] == "work");
  ctx.stop();
}

TEST_CASE("two event routes watching each other do not ping-pong") {
  rc::context ctx(rc::virtual_time);
  auto a_src = rc::on_event("route:exchange:completed");
  auto b_src = rc::on_event("route:exchange:completed");
  rc::spy<rc::event_message> a, b;
  ctx.add(rc::craft().id("a").from(a_src).to(a));
  ctx.add(rc::craft().id("b").from(b_src).to(b));
  ctx.add(rc::craft().id("work").from(rc::simple(1)).to(rc::noop()));
  ctx.start();
  ctx.run_until_idle();
  CHECK(a.count() == 1);  // work's completion only
  CHECK(b.count() == 1);
  CHECK(a_src.suppressed() == 1);  // b's completion, caused by an event
  CHECK(b_src.suppressed() == 1);
  ctx.stop();
}

TEST_CASE("max_depth lets a bounded chain of event routes through") {
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::event_message> a, b;
  ctx.add(rc::craft().id("a").from(rc::on_event({.names = {"route:exchange:completed"}, .max_depth = 2})).to(a));
  ctx.add(rc::craft().id("b").from(rc::on_event({.names = {"route:exchange:completed"}, .max_depth = 2})).to(b));
  ctx.add(rc::craft().id("work").from(rc::simple(1)).to(rc::noop()));
  ctx.start();
  ctx.run_until_idle();
  // work -> a and b (depth 1); a's completion -> b, b's -> a (depth 2); then it stops.
  CHECK(a.count() == 2);
  CHECK(b.count() == 2);
  std::vector<int> depths;
  for (const auto& r : a.received()) depths.push_back(r.headers.find("routecraft.event.depth")->get<int>());
  CHECK(depths == std::vector<int>{1, 2});
  ctx.stop();
}

TEST_CASE("events sent while the event route is busy queue, a full queue drops the oldest and says so") {
  rc::context ctx(rc::virtual_time);
  event_recorder overflow(ctx, "route:event:overflow");
  event_recorder starts(ctx, "route:exchange:started");
  auto src = rc::on_event({.names = {"route:exchange:started"}, .queue_capacity = 3});
  rc::spy<rc::event_message> seen;
  ctx.add(rc::craft().id("slow").from(src).delay(1s).to(seen));
  // Ten exchanges start at once while the event route takes a second per event.
  ctx.add(rc::craft().id("burst").from(rc::simple(std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})).to(rc::noop()));
  ctx.start();
  ctx.advance(1min);
  // The burst runs to its end before the event route gets a turn: of the ten events the last
  // three are queued, the oldest seven dropped.
  CHECK(seen.count() == 3);
  CHECK(src.dropped() == 7);
  REQUIRE(overflow.count("route:event:overflow") == 7);
  const auto last = overflow.all().back().details;
  CHECK(last["routeId"] == "slow");
  CHECK(last["event"] == "route:exchange:started");
  CHECK(last["dropped"] == 7);
  std::vector<std::string> kept;
  for (const auto& b : seen.bodies()) kept.push_back(b.details["exchangeId"].get<std::string>());
  std::vector<std::string> started;
  for (const auto& e : starts.all())
    if (e.details["routeId"] == "burst") started.push_back(e.details["exchangeId"].get<std::string>());
  REQUIRE(started.size() == 10);
  CHECK(kept == std::vector<std::string>(started.end() - 3, started.end()));
  CHECK(last["capacity"] == 3);
  ctx.stop();
}

TEST_CASE("drop_newest keeps what is queued and drops the new event") {
  rc::context ctx(rc::virtual_time);
  auto src = rc::on_event(
      {.names = {"route:exchange:started"}, .queue_capacity = 2, .overflow = rc::event_overflow::drop_newest});
  event_recorder starts(ctx, "route:exchange:started");
  rc::spy<rc::event_message> seen;
  ctx.add(rc::craft().id("slow").from(src).delay(1s).to(seen));
  ctx.add(rc::craft().id("burst").from(rc::sequence(std::vector<int>{0, 1, 2, 3, 4})).to(rc::noop()));
  ctx.start();
  ctx.advance(1min);
  CHECK(seen.count() == 2);
  CHECK(src.dropped() == 3);
  std::vector<std::string> kept;
  for (const auto& b : seen.bodies()) kept.push_back(b.details["exchangeId"].get<std::string>());
  std::vector<std::string> started;
  for (const auto& e : starts.all())
    if (e.details["routeId"] == "burst") started.push_back(e.details["exchangeId"].get<std::string>());
  REQUIRE(started.size() == 5);
  CHECK(kept == std::vector<std::string>(started.begin(), started.begin() + 2));
  ctx.stop();
}

TEST_CASE("on_event rejects names that match no event, a zero capacity and a zero depth") {
  CHECK_THROWS_MATCHES(rc::on_event("route:throttle:rejectd"), rc::error,
                       rc_error(rc::errc::misconfigured, "event({ names })"));
  CHECK_THROWS_MATCHES(rc::on_event("nothing:*"), rc::error, rc_error(rc::errc::misconfigured, "\"nothing:*\""));
  CHECK_THROWS_MATCHES(rc::on_event({.queue_capacity = 0}), rc::error,
                       rc_error(rc::errc::misconfigured, "event({ queue_capacity })"));
  CHECK_THROWS_MATCHES(rc::on_event({.max_depth = 0}), rc::error,
                       rc_error(rc::errc::misconfigured, "event({ max_depth })"));
  CHECK_NOTHROW(rc::on_event("route:*"));
}

TEST_CASE("an event route stops with the context and drops what it had queued") {
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::event_message> seen;
  ctx.add(rc::craft().id("w").from(rc::on_event("route:exchange:completed")).to(seen));
  ctx.add(rc::craft().id("x").from(rc::simple(1)).to(rc::noop()));
  ctx.start();
  ctx.run_until_idle();
  CHECK(seen.count() == 1);
  const auto r = ctx.stop();
  CHECK_FALSE(r.forced);
}

TEST_CASE("on_event on a real clock with two threads delivers every event once") {
  rc::context ctx(rc::context_options{.threads = 2});
  rc::spy<rc::event_message> seen;
  ctx.add(rc::craft().id("w").from(rc::on_event("route:exchange:completed")).to(seen));
  ctx.add(rc::craft().id("x").from(rc::simple(std::vector<int>(200, 1))).to(rc::noop()));
  ctx.start();
  ctx.drain();  // x is done; the event route may still be working through its queue
  for (int i = 0; i < 400 && seen.count() < 200; ++i) std::this_thread::sleep_for(5ms);
  CHECK(seen.count() == 200);
  std::set<std::string> ids;
  for (const auto& b : seen.bodies()) ids.insert(b.details["exchangeId"].get<std::string>());
  CHECK(ids.size() == 200);
  ctx.stop();
}

}  // namespace event_source_test
