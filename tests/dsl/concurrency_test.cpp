// concurrency (bulkhead) through the DSL, in virtual time: slots, the FIFO queue, reject mode,
// keys, release on every ending, shutdown, client disconnect, timeouts, both scopes.
#include <algorithm>
#include <catch2/catch.hpp>
#include <memory>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"
#include "support/slow_work.hpp"
#include "support/traffic.hpp"

namespace concurrency_test {

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

std::string by_client(const rc::exchange& ex) { return ex.header_or("x-client", ""); }

/// The concurrency wrapper at the top of a step (possibly inside other wrappers).
const rc::concurrency_gate* find_gate(const rc::step* s) {
  while (s) {
    if (const auto* g = dynamic_cast<const rc::concurrency_gate*>(s)) return g;
    const auto* w = dynamic_cast<const rc::wrapper*>(s);
    s = w ? w->inner() : nullptr;
  }
  return nullptr;
}

std::vector<double> field_ms(const std::vector<rc::test::recorded_event>& events, const char* field) {
  std::vector<double> out;
  for (const auto& e : events) out.push_back(e.details[field].get<double>());
  return out;
}

}  // namespace

// ---- queue mode -----------------------------------------------------------------------------

TEST_CASE("max 2 runs two at once and queues the rest in arrival order") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx);
  ctx.add(rc::craft().id("c").from(traffic(burst(5), log)).concurrency({.max = 2}).to(slow_work(100ms, work)));
  ctx.start();
  ctx.drain();
  CHECK(in_ms(work->started) == std::vector<double>{0, 0, 100, 100, 200});
  for (int id = 1; id <= 5; ++id) CHECK(log[id].passed());
  const auto queued = events.named("route:concurrency:queued");
  CHECK(field_ms(queued, "queueDepth") == std::vector<double>{1, 2, 3});
  const auto acquired = events.named("route:concurrency:acquired");
  CHECK(field_ms(acquired, "waited") == std::vector<double>{0, 0, 100, 100, 200});
  CHECK(field_ms(acquired, "inUse") == std::vector<double>{1, 2, 2, 2, 2});
  const auto released = events.named("route:concurrency:released");
  CHECK(field_ms(released, "heldMs") == std::vector<double>{100, 100, 100, 100, 100});
  const auto& a = acquired.at(0).details;
  CHECK(a["scope"] == "step");
  CHECK(a["stepLabel"] == "to");
  CHECK(a["routeId"] == "c");
  CHECK(a.contains("exchangeId"));
  CHECK(a.contains("correlationId"));
  CHECK_FALSE(a.contains("key"));
  CHECK_FALSE(a.contains("label"));
}

TEST_CASE("a slot is released when the step fails, and the next in line gets it") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx, "route:concurrency:released");
  ctx.add(rc::craft()
              .id("c")
              .from(traffic(burst(2), log))
              .concurrency({.max = 1})
              .to(slow_work(10ms, work, true, 1)));  // the first call fails
  ctx.start();
  ctx.drain();
  REQUIRE(log[1].failure);
  CHECK(log[1].answered == 10ms);
  CHECK(log[2].passed());
  CHECK(log[2].answered == 20ms);
  CHECK(events.count("route:concurrency:released") == 2);
}

TEST_CASE("max_queue refuses with RC5026 queue-full once that many wait") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx, "route:concurrency:rejected");
  ctx.add(rc::craft()
              .id("c")
              .from(traffic(burst(4), log))
              .concurrency({.max = 1, .max_queue = 2, .label = "db"})
              .to(slow_work(10ms, work)));
  ctx.start();
  ctx.drain();
  CHECK(log[1].passed());
  CHECK(log[2].passed());
  CHECK(log[3].passed());
  REQUIRE(log[4].failure);
  CHECK(log[4].failure->code() == rc::errc::concurrency_limited);
  CHECK(log[4].failure->retryable());
  CHECK(log[4].failure->details()["reason"] == "queue-full");
  CHECK(log[4].answered == 0ms);
  const auto rejected = events.named("route:concurrency:rejected");
  REQUIRE(rejected.size() == 1);
  CHECK(rejected[0].details["reason"] == "queue-full");
  CHECK(rejected[0].details["label"] == "db");
}

// ---- reject mode ----------------------------------------------------------------------------

TEST_CASE("reject mode refuses with RC5026 busy when no slot is free") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("c")
              .from(traffic(burst(3) + burst(1, 50ms), log))
              .concurrency({.max = 1, .mode = rc::concurrency_mode::reject})
              .to(slow_work(50ms, work)));
  ctx.start();
  ctx.drain();
  CHECK(log[1].passed());
  for (int id : {2, 3}) {
    REQUIRE(log[id].failure);
    CHECK(log[id].failure->code() == rc::errc::concurrency_limited);
    CHECK(log[id].failure->details()["reason"] == "busy");
  }
  CHECK(log[4].passed());  // the slot was back at 50 ms
  CHECK(events.count("route:concurrency:queued") == 0);
  const auto rejected = events.named("route:concurrency:rejected");
  REQUIRE(rejected.size() == 2);
  CHECK(rejected[0].details["reason"] == "busy");
  CHECK(rejected[0].details["scope"] == "step");
}

// ---- keys -----------------------------------------------------------------------------------

TEST_CASE("a keyed bulkhead gives each key its own slots and forgets idle keys") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx, "route:concurrency:acquired");
  auto def = rc::craft()
                 .id("c")
                 .from(traffic(burst(2, 0ms, "a") + burst(1, 0ms, "b"), log))
                 .concurrency({.max = 1, .key = by_client})
                 .to(slow_work(100ms, work))
                 .build();
  const auto* gate = find_gate(def.steps.at(0).get());
  REQUIRE(gate != nullptr);
  ctx.add(std::move(def));
  ctx.start();
  ctx.advance(10ms);
  CHECK(gate->usage().keys == 2);
  CHECK(gate->usage().in_use == 2);
  CHECK(gate->usage().queued == 1);
  CHECK(gate->usage().memory_bytes > 0);
  ctx.drain();
  CHECK(log[1].answered == 100ms);
  CHECK(log[2].answered == 200ms);
  CHECK(log[3].answered == 100ms);
  const auto acquired = events.named("route:concurrency:acquired");
  REQUIRE(acquired.size() == 3);
  CHECK(acquired[0].details["key"] == "a");
  CHECK(acquired[1].details["key"] == "b");
  CHECK(acquired[2].details["key"] == "a");
  const auto st = gate->usage();
  CHECK(st.keys == 0);
  CHECK(st.in_use == 0);
  CHECK(st.queued == 0);
  CHECK(st.memory_bytes == 0);
}

TEST_CASE("when max_keys keys are busy a new key is refused busy, never admitted unbounded") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  ctx.add(rc::craft()
              .id("c")
              .from(traffic(burst(1, 0ms, "a") + burst(1, 0ms, "b") + burst(1, 200ms, "b"), log))
              .concurrency({.max = 1, .key = by_client, .max_keys = 1})
              .to(slow_work(100ms, work)));
  ctx.start();
  ctx.drain();
  CHECK(log[1].passed());
  REQUIRE(log[2].failure);
  CHECK(log[2].failure->code() == rc::errc::concurrency_limited);
  CHECK(log[2].failure->details()["reason"] == "busy");
  CHECK(log[3].passed());  // "a" was forgotten once idle
}

TEST_CASE("a throwing key selector fails only that exchange with RC5003 naming key") {
  rc::context ctx(rc::virtual_time);
  traffic_log log;
  ctx.add(
      rc::craft()
          .id("c")
          .from(traffic(burst(1), log))
          .concurrency({.max = 1, .key = [](const rc::exchange&) -> std::string { throw std::runtime_error("no"); }})
          .to(rc::noop()));
  ctx.start();
  ctx.drain();
  REQUIRE(log[1].failure);
  CHECK(log[1].failure->code() == rc::errc::misconfigured);
  CHECK_THAT(log[1].failure->message(), Catch::Contains("concurrency({ key })"));
}

// ---- shutdown, client disconnect, timeouts -----------------------------------------------------

TEST_CASE("shutdown admits the queue at once") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  ctx.add(rc::craft().id("c").from(traffic(burst(3), log)).concurrency({.max = 1}).to(slow_work(1s, work, false)));
  ctx.start();
  ctx.advance(100ms);
  const auto result = ctx.stop();
  CHECK_FALSE(result.forced);
  CHECK(in_ms(work->started) == std::vector<double>{0, 100, 100});
  for (int id = 1; id <= 3; ++id) CHECK(log[id].passed());
}

TEST_CASE("a queued exchange whose client goes away leaves the queue, dropped as client-gone") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  rc::cancel_signal hang_up(ctx.clock());
  auto script = burst(3);
  script[1].abort = &hang_up;
  auto def = rc::craft().id("c").from(traffic(script, log)).concurrency({.max = 1}).to(slow_work(100ms, work)).build();
  const auto* gate = find_gate(def.steps.at(0).get());
  ctx.add(std::move(def));
  ctx.start();
  ctx.advance(50ms);
  CHECK(gate->usage().queued == 2);
  hang_up.fire();
  ctx.advance(1ms);
  CHECK(gate->usage().queued == 1);
  ctx.drain();
  CHECK(log[2].drop_reason == "client-gone");
  CHECK(log[2].answered == 50ms);
  CHECK(log[3].answered == 200ms);  // moved up: next after request 1
  CHECK(gate->usage().in_use == 0);
}

TEST_CASE("a client going away while holding a slot gives it back (the delay inside drops)") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  traffic_log log;
  rc::cancel_signal hang_up(ctx.clock());
  auto script = burst(2);
  script[0].abort = &hang_up;
  ctx.add(rc::craft().id("c").from(traffic(script, log)).concurrency({.max = 1}).delay(100ms).to(out));
  ctx.start();
  ctx.advance(30ms);
  hang_up.fire();
  ctx.drain();
  CHECK(log[1].drop_reason == "client-gone");
  CHECK(log[1].answered == 30ms);
  CHECK(log[2].passed());
  CHECK(log[2].answered == 130ms);
}

TEST_CASE("a queued exchange inside a timeout leaves the queue at the deadline with RC5011") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx);
  auto def = rc::craft()
                 .id("c")
                 .from(traffic(burst(3), log))
                 .timeout(50ms)
                 .concurrency({.max = 1})
                 .to(slow_work(40ms, work))
                 .build();
  const auto* gate = find_gate(def.steps.at(0).get());
  ctx.add(std::move(def));
  ctx.start();
  ctx.drain();
  CHECK(log[1].passed());
  for (int id : {2, 3}) {
    REQUIRE(log[id].failure);
    CHECK(log[id].failure->code() == rc::errc::timed_out);
    CHECK(log[id].answered == 50ms);
  }
  // Request 2 got the slot at 40 ms and was cut short at 50 ms; request 3 was still queued.
  CHECK(events.count("route:concurrency:acquired") == 2);
  CHECK(events.count("route:concurrency:released") == 2);
  CHECK(events.count("route:concurrency:queued") == 2);
  CHECK(gate->usage().in_use == 0);
  CHECK(gate->usage().queued == 0);
}

TEST_CASE("a timeout while holding a slot releases it for the next in line") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  ctx.add(rc::craft()
              .id("c")
              .from(traffic(burst(2), log))
              .concurrency({.max = 1})
              .timeout(30ms)
              .to(slow_work(100ms, work)));
  ctx.start();
  ctx.drain();
  CHECK(in_ms(work->started) == std::vector<double>{0, 30});
  CHECK(log[1].failure);
  CHECK(log[2].failure);
  CHECK(log[2].answered == 60ms);
}

TEST_CASE(
    "Cancellation frees resources: 10,000 exchanges that time out while queued in a throttle "
    "and in a concurrency gate leave both with nothing held") {
  // 10 clients send 1,000 each at once, interleaved. The throttle (100/s, burst 100) lets 100
  // through and queues 9,900; the keyed bulkhead (1 per client) runs 10 and queues 90. At 50 ms every one
  // still waiting times out. Afterwards nothing is held: no slot, no waiter, no key, no bytes in
  // the bulkhead, no scheduler wait, and the throttle has its tokens back.
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  std::vector<rc::test::request> script;
  for (int i = 0; i < 1000; ++i)
    for (int c = 0; c < 10; ++c) script.push_back({.at = 0ms, .client = "client-" + std::to_string(c)});
  for (int i = 0; i < 100; ++i) script.push_back({.at = 2s, .client = "late-" + std::to_string(i)});
  auto def = rc::craft()
                 .id("c")
                 .from(traffic(script, log))
                 .timeout(50ms)
                 .throttle({.rate = 100, .burst = 100})
                 .concurrency({.max = 1, .key = by_client})
                 .to(slow_work(1s, work))
                 .build();
  const auto* gate = find_gate(def.steps.at(0).get());
  REQUIRE(gate != nullptr);
  const auto before = gate->usage();
  CHECK(before.memory_bytes == 0);
  ctx.add(std::move(def));
  ctx.start();
  ctx.advance(5ms);  // (at 10 ms the throttle releases its next token)
  CHECK(gate->usage().in_use == 10);
  CHECK(gate->usage().queued == 90);
  ctx.advance(1s);
  const auto after = gate->usage();
  CHECK(after.in_use == 0);
  CHECK(after.queued == 0);
  CHECK(after.keys == 0);
  CHECK(after.memory_bytes == before.memory_bytes);
  CHECK(ctx.clock().pending() <= 1);  // the source's sleep until 2 s
  int timed_out = 0;
  for (int id = 1; id <= 10000; ++id)
    if (log[id].failure && log[id].failure->code() == rc::errc::timed_out) ++timed_out;
  CHECK(timed_out == 10000);
  // The throttle gave back the 9,900 queued tokens: at 2 s a burst of 100 passes at once
  // (without them it would queue behind 99 s of reserved tokens).
  ctx.drain();
  const auto at_2s = std::count(work->started.begin(), work->started.end(), rc::duration(2s));
  CHECK(at_2s == 100);
  CHECK(ctx.clock().pending() == 0);
  CHECK(gate->usage().memory_bytes == before.memory_bytes);
}

// ---- route scope ----------------------------------------------------------------------------

TEST_CASE("route scope: no concurrency slot is held during a retry backoff") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .concurrency({.max = 1})
              .retry({.max_attempts = 2, .backoff = 100ms})
              .from(traffic(burst(2), log))
              .to(slow_work(10ms, work, true, 1)));
  ctx.start();
  ctx.drain();
  // Request 1's first call fails at 10 ms; request 2 takes the slot during its 100 ms backoff.
  CHECK(in_ms(work->started) == std::vector<double>{0, 10, 110});
  CHECK(log[1].passed());
  CHECK(log[2].passed());
  const auto acquired = events.named("route:concurrency:acquired");
  REQUIRE(acquired.size() == 3);
  CHECK(acquired[0].details["scope"] == "route");
  CHECK(acquired[0].details["stepLabel"] == "route");
  CHECK(events.count("route:concurrency:released") == 3);
}

TEST_CASE("route scope: stacked bulkheads both apply and a refusal is RC5026") {
  rc::context ctx(rc::virtual_time);
  auto work = std::make_shared<work_log>();
  traffic_log log;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .concurrency({.max = 3, .label = "outer"})
              .concurrency({.max = 1, .mode = rc::concurrency_mode::reject, .label = "inner"})
              .from(traffic(burst(4), log))
              .to(slow_work(10ms, work)));
  ctx.start();
  ctx.drain();
  // The inner admits one and refuses the others at once, each giving its outer slot back
  // before the next arrives: nobody queues.
  CHECK(work->started.size() == 1);
  int refused = 0;
  for (int id = 1; id <= 4; ++id)
    if (log[id].failure && log[id].failure->code() == rc::errc::concurrency_limited) ++refused;
  CHECK(refused == 3);
  CHECK(events.count("route:concurrency:queued") == 0);
  CHECK(events.count("route:concurrency:acquired") == 5);  // 4 outer, 1 inner
  const auto rejected = events.named("route:concurrency:rejected");
  REQUIRE(rejected.size() == 3);
  CHECK(rejected[0].details["label"] == "inner");
  CHECK(rejected[0].details["scope"] == "route");
}

// ---- validation -----------------------------------------------------------------------------

TEST_CASE("concurrency rejects bad options with RC5003 naming the option and the value") {
  CHECK_THROWS_MATCHES(rc::craft().concurrency({}), rc::error,
                       rc_error(rc::errc::misconfigured, "concurrency({ max }) must be an integer >= 1, got 0."));
  CHECK_THROWS_MATCHES(rc::craft().concurrency({.max = -2}), rc::error, rc_error(rc::errc::misconfigured, "got -2"));
  CHECK_THROWS_MATCHES(rc::craft().concurrency({.max = 1, .max_queue = 0}), rc::error,
                       rc_error(rc::errc::misconfigured, "concurrency({ max_queue }) must be an integer >= 1, got 0."));
  CHECK_THROWS_MATCHES(rc::craft().concurrency({.max = 1, .mode = rc::concurrency_mode::reject, .max_queue = 5}),
                       rc::error, rc_error(rc::errc::misconfigured, "concurrency({ max_queue }) must be left unset"));
  CHECK_THROWS_MATCHES(rc::craft().concurrency({.max = 1, .max_keys = 0}), rc::error,
                       rc_error(rc::errc::misconfigured, "concurrency({ max_keys })"));
  CHECK_THROWS_MATCHES(rc::craft().concurrency({.max = 1, .max_keys = 1'000'001}), rc::error,
                       rc_error(rc::errc::misconfigured, "got 1000001"));
  CHECK_THROWS_MATCHES(rc::craft().concurrency({.max = 1, .mode = static_cast<rc::concurrency_mode>(7)}), rc::error,
                       rc_error(rc::errc::misconfigured, "concurrency({ mode })"));
  auto b = rc::craft().id("v").from(rc::simple(1));
  CHECK_THROWS_MATCHES(std::move(b).concurrency({.max = 0}), rc::error,
                       rc_error(rc::errc::misconfigured, "concurrency({ max })"));
  CHECK_NOTHROW(rc::craft().concurrency({.max = 1, .max_queue = 1, .max_keys = 1}));
  CHECK_NOTHROW(rc::craft().concurrency({.max = 1, .max_keys = 1'000'000}));
}

TEST_CASE("reject mode around a synchronous step takes and releases a slot for each exchange") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("c")
              .from(rc::simple(std::vector<int>{1, 2, 3}))
              .concurrency({.max = 1, .mode = rc::concurrency_mode::reject})
              .transform([](int v) { return v * 2; })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.count() == 3);
  CHECK(events.count("route:concurrency:acquired") == 3);
  CHECK(events.count("route:concurrency:released") == 3);
  CHECK(events.count("route:concurrency:rejected") == 0);
  CHECK(events.named("route:concurrency:acquired").at(0).details["stepLabel"] == "transform");
}

TEST_CASE("an RC5026 rejection says which bound refused it, and reads in full after the context is gone") {
  struct variant {
    rc::concurrency_options options;
    std::vector<rc::test::request> script;
    std::string message;
    nlohmann::json details;
  };
  const auto v = GENERATE(variant{{.max = 1, .mode = rc::concurrency_mode::reject, .label = "db"},
                                  burst(2),
                                  "concurrency rejected the exchange: all 1 slots are in use",
                                  {{"gate", "concurrency"}, {"reason", "busy"}, {"max", 1}, {"label", "db"}}},
                          variant{{.max = 1, .max_queue = 1},
                                  burst(3),
                                  "concurrency rejected the exchange: the queue is full (1 waiting)",
                                  {{"gate", "concurrency"}, {"reason", "queue-full"}, {"max", 1}}},
                          variant{{.max = 1, .key = by_client, .max_keys = 1},
                                  burst(1, 0ms, "a") + burst(1, 0ms, "b") + burst(1, 0ms, "b"),
                                  "concurrency rejected the exchange: all 1 keys are busy (max_keys) for key \"b\"",
                                  {{"gate", "concurrency"}, {"reason", "busy"}, {"max", 1}, {"key", "b"}}});
  CAPTURE(v.message);
  std::optional<rc::error> rejected;
  {
    rc::context ctx(rc::virtual_time);
    auto work = std::make_shared<work_log>();
    traffic_log log;
    ctx.add(rc::craft().id("c").from(traffic(v.script, log)).concurrency(v.options).to(slow_work(100ms, work)));
    ctx.start();
    ctx.drain();
    ctx.stop();
    const int last = static_cast<int>(v.script.size());
    REQUIRE(log[last].failure);
    rejected = *log[last].failure;  // a copy, taken before anything was read
  }
  CHECK(rejected->code() == rc::errc::concurrency_limited);
  CHECK(rejected->retryable());
  CHECK(rejected->message() == v.message);
  CHECK(std::string(rejected->what()) == "RC5026: " + v.message);
  CHECK(rejected->details() == v.details);
}

}  // namespace concurrency_test
