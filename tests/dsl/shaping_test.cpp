// dedupe, sample, debounce and batch through the DSL, in virtual time: exact drop reasons, release
// times, flush reasons and a terminal event for every exchange.
#include <catch2/catch.hpp>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/dsl_support.hpp"

namespace shaping_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;
using rc::test::in_ms;
using rc::test::rc_error;

namespace {

std::vector<int> range(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

/// Bodies arriving at the given offsets (ms), without waiting for their runs.
rc::test::arrivals_source<int> bodies_at(std::vector<std::pair<int, int>> plan) {
  std::vector<std::pair<rc::duration, int>> p;
  for (auto [ms, body] : plan) p.emplace_back(std::chrono::milliseconds(ms), body);
  return rc::test::arrivals_source<int>(std::move(p));
}

std::vector<std::string> drop_reasons(const event_recorder& events) {
  std::vector<std::string> out;
  for (const auto& e : events.named("route:exchange:dropped")) out.push_back(e.details["reason"].get<std::string>());
  return out;
}

std::size_t terminal_events(const event_recorder& events) {
  return events.count("route:exchange:completed") + events.count("route:exchange:failed") +
         events.count("route:exchange:dropped");
}

struct opaque {
  int v = 0;
};

}  // namespace

// ---- dedupe ---------------------------------------------------------------------------------

TEST_CASE("dedupe drops a body seen in flight or completed within ttl, and passes it again after ttl") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("d")
              .from(bodies_at({{0, 1}, {5, 1}, {10, 2}, {20, 1}, {109, 1}, {111, 1}}))
              .dedupe({.ttl = 100ms})
              .delay(10ms)
              .to(out));
  ctx.start();
  ctx.drain();
  // 1 reserved at 0 (in flight until 10, then committed until 110): 5, 20 and 109 are duplicates.
  CHECK(out.bodies() == std::vector<int>{1, 2, 1});
  CHECK(in_ms(out.times()) == std::vector<double>{10, 20, 121});
  CHECK(drop_reasons(events) == std::vector<std::string>{"duplicate", "duplicate", "duplicate"});
  CHECK(events.count("route:operation:dedupe:duplicate") == 3);
  CHECK(events.count("route:operation:dedupe:pass") == 3);
  CHECK(terminal_events(events) == 6);
}

TEST_CASE("dedupe releases the key of a failed exchange so a retry passes, then commits it on success") {
  rc::context ctx(rc::virtual_time);
  int calls = 0;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("d").from(bodies_at({{0, 7}, {10, 7}, {20, 7}})).dedupe({.ttl = 1s}).to([&](int&) {
    if (++calls == 1) throw std::runtime_error("downstream down");
  }));
  ctx.start();
  ctx.drain();
  CHECK(calls == 2);  // the first failed (released), the second passed and completed (committed)
  CHECK(events.count("route:exchange:failed") == 1);
  CHECK(events.count("route:exchange:completed") == 1);
  CHECK(drop_reasons(events) == std::vector<std::string>{"duplicate"});
}

TEST_CASE("dedupe under a route retry: the exchange run again is not its own duplicate") {
  rc::context ctx(rc::virtual_time);
  int calls = 0;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("d").retry({.max_attempts = 3}).from(rc::simple(5)).dedupe().to([&](int&) {
    if (++calls < 3) throw std::runtime_error("flaky");
  }));
  ctx.start();
  ctx.drain();
  CHECK(calls == 3);
  CHECK(events.count("route:exchange:completed") == 1);
  CHECK(drop_reasons(events).empty());
}

TEST_CASE("dedupe releases the key of an exchange dropped later in the route") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  int seen = 0;
  ctx.add(rc::craft()
              .id("d")
              .from(bodies_at({{0, 3}, {10, 3}}))
              .dedupe()
              .filter([&](const int&) { return ++seen > 1; })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{3});
}

TEST_CASE("dedupe keeps at most max_keys keys, forgetting the least recently committed first") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("d")
              .from(bodies_at({{0, 1}, {1, 2}, {2, 3}, {3, 1}, {4, 3}, {5, 2}}))
              .dedupe({.ttl = 1h, .max_keys = 2})
              .to(out));
  ctx.start();
  ctx.drain();
  // 3 evicts 1; 1 evicts 2; then 3 is still known (duplicate) and 2 is not.
  CHECK(out.bodies() == std::vector<int>{1, 2, 3, 1, 2});
}

TEST_CASE("dedupe never evicts a key in flight: a full table of them fails the newcomer with RC5034") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("d")
              .from(bodies_at({{0, 1}, {1, 2}, {2, 3}, {200, 3}}))
              .dedupe({.max_keys = 2})
              .delay(100ms)
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{1, 2, 3});
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].details["error"]["code"] == "RC5034");
}

TEST_CASE("dedupe with a key function and a body without JSON form") {
  rc::context ctx(rc::virtual_time);
  rc::spy<opaque> out;
  ctx.add(rc::craft()
              .id("d")
              .from(rc::simple(std::vector<opaque>{{1}, {2}, {1}}))
              .dedupe({.key = [](const rc::exchange& ex) { return std::to_string(ex.body<opaque>().v); }})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.count() == 2);
}

TEST_CASE("dedupe options are checked at the call (RC5003)") {
  auto b = [] { return rc::craft().from(rc::simple(1)); };
  CHECK_THROWS_MATCHES(b().dedupe({.ttl = 0ms}), rc::error, rc_error(rc::errc::misconfigured, "dedupe({ ttl })"));
  CHECK_THROWS_MATCHES(b().dedupe({.max_keys = 0}), rc::error,
                       rc_error(rc::errc::misconfigured, "dedupe({ maxKeys }) must be between 1"));
  CHECK_THROWS_MATCHES(rc::craft().from(rc::simple(opaque{})).dedupe(), rc::error,
                       rc_error(rc::errc::misconfigured, "dedupe({ key }) must be given"));
}

// ---- sample ---------------------------------------------------------------------------------

TEST_CASE("sample every 3 passes the 3rd and 6th of 7 and drops the rest as sampled") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("s").from(rc::sequence(range(7))).sample({.every = 3}).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{2, 5});
  CHECK(drop_reasons(events) == std::vector<std::string>(5, "sampled"));
  CHECK(events.count("route:operation:sample:passed") == 2);
  CHECK(events.count("route:operation:sample:dropped") == 5);
}

TEST_CASE("sample interval 100 ms passes the first arrival, then the first at least 100 ms after the last passed") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("s")
              .from(rc::test::arrivals({0ms, 50ms, 99ms, 100ms, 150ms, 250ms}))
              .sample({.interval = 100ms})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{0, 3, 5});
  CHECK(in_ms(out.times()) == std::vector<double>{0, 100, 250});
  CHECK(drop_reasons(events) == std::vector<std::string>(3, "sampled"));
}

TEST_CASE("sample needs exactly one of every and interval (RC5003)") {
  auto b = [] { return rc::craft().from(rc::simple(1)); };
  CHECK_THROWS_MATCHES(b().sample({}), rc::error,
                       rc_error(rc::errc::misconfigured, "sample({ every | interval }) must be exactly one"));
  CHECK_THROWS_MATCHES(b().sample({.every = 2, .interval = 1s}), rc::error,
                       rc_error(rc::errc::misconfigured, "got both"));
}

// ---- debounce -------------------------------------------------------------------------------

TEST_CASE("debounce releases the last exchange of a burst wait after its last arrival") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("b").from(rc::test::arrivals({0ms, 30ms, 60ms, 200ms})).debounce({.wait = 50ms}).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{2, 3});
  CHECK(in_ms(out.times()) == std::vector<double>{110, 250});
  CHECK(drop_reasons(events) == std::vector<std::string>{"debounced", "debounced"});
  const auto released = events.named("route:operation:debounce:released");
  REQUIRE(released.size() == 2);
  CHECK(released[0].details["reason"] == "wait");
  CHECK(released[0].details["burstMs"] == 110.0);
  CHECK(events.count("route:operation:debounce:held") == 4);
  CHECK(events.count("route:operation:debounce:dropped") == 2);
  CHECK(terminal_events(events) == 4);
}

TEST_CASE("debounce keeps one burst per key") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(
      rc::craft()
          .id("b")
          .from(rc::test::arrivals({0ms, 10ms, 20ms, 30ms, 40ms, 50ms}))
          .debounce({.wait = 25ms, .key = [](const rc::exchange& ex) { return std::to_string(ex.body<int>() % 2); }})
          .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{4, 5});
  CHECK(in_ms(out.times()) == std::vector<double>{65, 75});
}

TEST_CASE("debounce max_wait releases a burst that never goes quiet, max_wait after its first arrival") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("b")
              .from(rc::test::arrivals({0ms, 30ms, 60ms, 90ms, 120ms, 150ms, 180ms}))
              .debounce({.wait = 50ms, .max_wait = 100ms})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{3, 6});
  CHECK(in_ms(out.times()) == std::vector<double>{100, 220});
  const auto released = events.named("route:operation:debounce:released");
  REQUIRE(released.size() == 2);
  CHECK(released[0].details["reason"] == "maxWait");
  CHECK(released[1].details["reason"] == "maxWait");
  CHECK(drop_reasons(events) == std::vector<std::string>(5, "debounced"));
}

TEST_CASE("debounce releases the held exchange at once when the route stops") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("b").from(rc::test::arrivals({0ms, 5ms, 10s})).debounce({.wait = 1s}).to(out));
  ctx.start();
  ctx.advance(20ms);
  ctx.stop();
  CHECK(out.bodies() == std::vector<int>{1});
  CHECK(in_ms(out.times()) == std::vector<double>{20});
  const auto released = events.named("route:operation:debounce:released");
  REQUIRE(released.size() == 1);
  CHECK(released[0].details["reason"] == "stop");
  CHECK(terminal_events(events) == 2);
}

TEST_CASE("debounce options are checked at the call, and debounce cannot be wrapped (RC5003)") {
  auto b = [] { return rc::craft().from(rc::simple(1)); };
  CHECK_THROWS_MATCHES(b().debounce({}), rc::error, rc_error(rc::errc::misconfigured, "debounce({ wait })"));
  CHECK_THROWS_MATCHES(b().debounce({.wait = 50ms, .max_wait = 10ms}), rc::error,
                       rc_error(rc::errc::misconfigured, "debounce({ maxWait }) must be 0 (no limit) or at least"));
  CHECK_THROWS_MATCHES(b().retry().debounce({.wait = 1s}), rc::error,
                       rc_error(rc::errc::misconfigured, "debounce() cannot be wrapped by retry()"));
}

// ---- batch ----------------------------------------------------------------------------------

static_assert(std::is_same_v<decltype(rc::craft().from(rc::simple(1)).batch())::body_type, std::vector<int>>,
              "batch() makes the body a std::vector of the body before it");

TEST_CASE("batch by size: a sequential source fills batches of 3, the rest flushes after flush_interval") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::vector<int>> out;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("b").from(rc::sequence(range(7))).batch({.size = 3, .flush_interval = 1s}).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<std::vector<int>>{{0, 1, 2}, {3, 4, 5}, {6}});
  CHECK(in_ms(out.times()) == std::vector<double>{0, 0, 1000});
  const auto flushed = events.named("route:batch:flushed");
  REQUIRE(flushed.size() == 3);
  CHECK(flushed[0].details["reason"] == "size");
  CHECK(flushed[1].details["reason"] == "size");
  CHECK(flushed[2].details["reason"] == "time");
  CHECK(flushed[0].details["batchSize"] == 3);
  CHECK(flushed[2].details["batchSize"] == 1);
  CHECK(flushed[2].details["waitTime"] == 1000.0);
  const auto started = events.named("route:batch:started");
  REQUIRE(started.size() == 3);
  CHECK(started[0].details["batchSize"] == 3);  // the configured size
  CHECK(started[0].details["batchId"] == flushed[0].details["batchId"]);
  CHECK(started[1].details["batchId"] != started[0].details["batchId"]);
}

TEST_CASE("batch by time: flushed exactly flush_interval after each batch's first body") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::vector<int>> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("b")
              .from(rc::test::arrivals({0ms, 40ms, 90ms, 130ms, 250ms}))
              .batch({.size = 10, .flush_interval = 100ms})
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<std::vector<int>>{{0, 1, 2}, {3}, {4}});
  CHECK(in_ms(out.times()) == std::vector<double>{100, 230, 350});
  for (const auto& f : events.named("route:batch:flushed")) {
    CHECK(f.details["reason"] == "time");
    CHECK(f.details["waitTime"] == 100.0);
  }
}

TEST_CASE("batch: a stop flushes the partial batch (nothing lost) and says route:batch:stopped") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::vector<int>> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("b")
              .from(rc::test::arrivals({0ms, 10ms, 20ms, 10s}))
              .batch({.size = 10, .flush_interval = 1s})
              .to(out));
  ctx.start();
  ctx.advance(30ms);
  ctx.stop();
  CHECK(out.bodies() == std::vector<std::vector<int>>{{0, 1, 2}});
  CHECK(in_ms(out.times()) == std::vector<double>{30});
  const auto flushed = events.named("route:batch:flushed");
  REQUIRE(flushed.size() == 1);
  CHECK(flushed[0].details["reason"] == "stop");
  const auto stopped = events.named("route:batch:stopped");
  REQUIRE(stopped.size() == 1);
  CHECK(stopped[0].details["batchId"] == flushed[0].details["batchId"]);
  CHECK(events.names("route:batch:") ==
        std::vector<std::string>{"route:batch:started", "route:batch:flushed", "route:batch:stopped"});
}

TEST_CASE("batch: every item completes when folded in, every batch is an exchange with its own terminal event") {
  rc::context ctx(rc::virtual_time);
  std::vector<std::size_t> sizes;
  int batches = 0;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("b")
              .from(rc::simple(range(10)))
              .header("tenant", "acme")
              .batch({.size = 4, .flush_interval = 50ms})
              .to([&](std::vector<int>& b) {
                sizes.push_back(b.size());
                if (++batches == 2) throw std::runtime_error("sink down");
              }));
  ctx.start();
  ctx.drain();
  CHECK(sizes == std::vector<std::size_t>{4, 4, 2});
  // 10 items + 3 batches started; each ended once: 12 completed, the second batch failed.
  CHECK(events.count("route:exchange:started") == 13);
  CHECK(events.count("route:exchange:completed") == 12);
  CHECK(events.count("route:exchange:failed") == 1);
  CHECK(terminal_events(events) == 13);
  const auto failed = events.named("route:exchange:failed")[0].details;
  CHECK(failed["exchange"]["headers"]["tenant"] == "acme");  // the items' headers, merged
  const auto ids = events.named("route:batch:flushed");
  REQUIRE(ids.size() == 3);
  CHECK(failed["exchangeId"] == ids[1].details["batchId"]);
}

TEST_CASE("batch: the batch carries the first item's correlation id, steps after it see the vector") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::size_t> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("b")
              .from(rc::simple(range(2)))
              .batch({.size = 2})
              .transform([](std::vector<int> v) { return v.size(); })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<std::size_t>{2});
  const auto started = events.named("route:exchange:started");
  REQUIRE(started.size() == 3);
  const auto batch_id = events.named("route:batch:flushed")[0].details["batchId"];
  CHECK(started[2].details["exchangeId"] == batch_id);
  CHECK(started[2].details["correlationId"] == started[0].details["correlationId"]);
}

TEST_CASE("batch options are checked at the call, and batch cannot be wrapped (RC5003)") {
  auto b = [] { return rc::craft().from(rc::simple(1)); };
  CHECK_THROWS_MATCHES(b().batch({.size = 0}), rc::error, rc_error(rc::errc::misconfigured, "batch({ size })"));
  CHECK_THROWS_MATCHES(b().batch({.flush_interval = 0ms}), rc::error,
                       rc_error(rc::errc::misconfigured, "batch({ flushInterval })"));
  CHECK_THROWS_MATCHES(b().retry().batch(), rc::error,
                       rc_error(rc::errc::misconfigured, "batch() cannot be wrapped by retry()"));
}

TEST_CASE("batch: a step-scope wrapper after batch() wraps a step of the batch's pipeline, with its gate id") {
  rc::context ctx(rc::virtual_time);
  int calls = 0;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("b")
              .from(rc::simple(range(2)))
              .batch({.size = 2})
              .retry({.max_attempts = 2})
              .to([&](std::vector<int>&) {
                if (++calls == 1) throw std::runtime_error("once");
              }));
  ctx.start();
  ctx.drain();
  CHECK(calls == 2);
  const auto attempts = events.named("route:retry:attempt");
  REQUIRE(attempts.size() == 1);
  CHECK(attempts[0].details["gateId"] == "retry#1");
  CHECK(events.count("route:exchange:completed") == 3);
}

}  // namespace shaping_test
