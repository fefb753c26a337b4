// slow_down in virtual time: every time below is exact.
#include <catch2/catch.hpp>
#include <optional>
#include <rc/rc.hpp>

#include "support/deferred_details.hpp"
#include "support/traffic.hpp"

namespace slow_down_test {

using namespace std::chrono_literals;
using rc::test::burst;
using rc::test::request;
using rc::test::served_seconds;
using rc::test::traffic;
using rc::test::traffic_log;

namespace {

// The brief: three hits per 10 s at full speed, then (hit - 3)^2 seconds, at most 20 s.
rc::slow_down_options brief(rc::counting counting = rc::counting::sliding) {
  return {.window = 10s,
          .delay_after = 3,
          .delay =
              [](std::uint64_t hits) {
                auto n = hits - 3;
                return n * n * 1s;
              },
          .max_delay = 20s,
          .key = rc::by_header("x-client"),
          .counting = counting};
}

struct recorded {
  std::vector<nlohmann::json> passed, delayed, rejected;
};

// Runs `script` through from(traffic).slow_down(options).to(spy) until idle.
struct slow_down_run {
  rc::context ctx{rc::virtual_time};
  rc::spy<int> out;
  traffic_log log;
  recorded events;
  std::vector<rc::subscription> subs;

  slow_down_run() {
    subs.push_back(ctx.on("route:slowDown:passed", [this](const rc::event& e) { events.passed.push_back(e.details); }));
    subs.push_back(
        ctx.on("route:slowDown:delayed", [this](const rc::event& e) { events.delayed.push_back(e.details); }));
    subs.push_back(
        ctx.on("route:slowDown:rejected", [this](const rc::event& e) { events.rejected.push_back(e.details); }));
  }

  void run(std::vector<request> script, rc::slow_down_options options) {
    ctx.add(rc::craft().id("api").from(traffic(std::move(script), log)).slow_down(std::move(options)).to(out));
    ctx.start();
    ctx.drain();
  }
};

std::vector<std::uint64_t> hits_of(const std::vector<nlohmann::json>& events) {
  std::vector<std::uint64_t> out;
  for (const auto& e : events) out.push_back(e["hits"].get<std::uint64_t>());
  return out;
}

}  // namespace

// ---- the seed's tables: five requests at once ------------------------------------------------

TEST_CASE("five requests at once with a fixed 5 s delay: the first at once, the other four at 5 s") {
  slow_down_run r;
  r.run(burst(5), {.delay = 5s});  // delay_after 1 (the default): a constant is a valid delay
  CHECK(served_seconds(r.out, 5) == std::vector<double>{0, 5, 5, 5, 5});
  CHECK(r.out.bodies() == std::vector<int>{1, 2, 3, 4, 5});  // equal delays keep hit order
  CHECK(hits_of(r.events.delayed) == std::vector<std::uint64_t>{2, 3, 4, 5});
  for (const auto& e : r.events.delayed) CHECK(e["delayMs"] == 5000.0);
}

TEST_CASE("five requests at once with the default incremental delay: 0, 1, 2, 3 and 4 s") {
  slow_down_run r;
  r.run(burst(5), {});  // (hit - delay_after) * 1 s
  CHECK(served_seconds(r.out, 5) == std::vector<double>{0, 1, 2, 3, 4});
}

TEST_CASE("five requests at once with a quadratic delay: 0, 1, 4, 9 and 16 s") {
  slow_down_run r;
  r.run(burst(5), {.delay = [](std::uint64_t hits) {
          auto n = hits - 1;
          return n * n * 1s;
        }});
  CHECK(served_seconds(r.out, 5) == std::vector<double>{0, 1, 4, 9, 16});
  CHECK(hits_of(r.events.passed) == std::vector<std::uint64_t>{1, 2, 3, 4, 5});
}

TEST_CASE("the delay is clamped to max_delay") {
  slow_down_run r;
  r.run(burst(10), brief());
  // Hits 8, 9 and 10 would wait 25, 36 and 49 s.
  CHECK(served_seconds(r.out, 10) == std::vector<double>{0, 0, 0, 1, 4, 9, 16, 20, 20, 20});
}

// ---- windows ----------------------------------------------------------------------------------

TEST_CASE("two bursts 30 s apart both start fresh") {
  const auto counting = GENERATE(rc::counting::sliding, rc::counting::fixed);
  CAPTURE(rc::to_string(counting));
  slow_down_run r;
  r.run(burst(5) + burst(5, 30s), {.window = 30s, .counting = counting});
  // At exactly 30 s the first burst has left a 30 s window (sliding: (0 s, 30 s]; fixed: the
  // window opened at 0 s ends at 30 s).
  CHECK(served_seconds(r.out, 10) == std::vector<double>{0, 1, 2, 3, 4, 30, 31, 32, 33, 34});
  CHECK(hits_of(r.events.passed) == std::vector<std::uint64_t>{1, 2, 3, 4, 5, 1, 2, 3, 4, 5});
}

TEST_CASE("bursts every 15 s against a 10 s window never compound") {
  const auto counting = GENERATE(rc::counting::sliding, rc::counting::fixed);
  CAPTURE(rc::to_string(counting));
  slow_down_run r;
  r.run(burst(7) + burst(7, 15s) + burst(7, 30s), brief(counting));
  // The seventh of each burst still waits (16 s) when the next burst arrives; it counts where it
  // arrived, and leaving later extends nothing.
  CHECK(served_seconds(r.out, 21) == std::vector<double>{0,  0,  0,  1,  4,  9,  16,  //
                                                         15, 15, 15, 16, 19, 24, 31,  //
                                                         30, 30, 30, 31, 34, 39, 46});
  std::vector<std::uint64_t> expected;
  for (int b = 0; b < 3; ++b)
    for (std::uint64_t h = 4; h <= 7; ++h) expected.push_back(h);
  CHECK(hits_of(r.events.delayed) == expected);
}

TEST_CASE("one heavy client slows only itself when keyed, everyone when not") {
  const auto script = burst(6, 0s, "heavy") + burst(1, 0s, "light");

  slow_down_run keyed;
  keyed.run(script, brief());
  CHECK(served_seconds(keyed.out, 7) == std::vector<double>{0, 0, 0, 1, 4, 9, 0});

  auto shared = brief();
  shared.key = nullptr;
  slow_down_run unkeyed;
  unkeyed.run(script, std::move(shared));
  CHECK(served_seconds(unkeyed.out, 7) == std::vector<double>{0, 0, 0, 1, 4, 9, 16});
  CHECK_FALSE(unkeyed.events.passed.front().contains("key"));
  REQUIRE(keyed.events.passed.size() == 7);
  CHECK(keyed.events.passed[3]["key"] == "light");  // at 0 s, before heavy's delayed ones
  CHECK(keyed.events.passed[3]["hits"] == 1);
}

// ---- the client gives up ----------------------------------------------------------------------

TEST_CASE("a delay that would reach the caller's deadline fails fast with RC5013 and a retry_after") {
  const auto counting = GENERATE(rc::counting::sliding, rc::counting::fixed);
  CAPTURE(rc::to_string(counting));
  auto script = burst(7);
  for (int i = 0; i < 6; ++i) script[i].timeout = 5s;
  script[4].timeout = 4s;  // request 5 would be answered exactly at its deadline: too late
  slow_down_run r;
  r.run(script, brief(counting));

  CHECK(served_seconds(r.out, 7) == std::vector<double>{0, 0, 0, 1, -1, -1, 16});
  for (int id : {5, 6}) {
    CAPTURE(id);
    const auto& resp = r.log[id];
    REQUIRE(resp.refused());
    CHECK(resp.answered == 0s);  // at once, not after the delay
    CHECK(resp.failure->retryable());
    const auto& d = resp.failure->details();
    CHECK(d["gate"] == "slowDown");
    CHECK(d["key"] == "a");
    CHECK(d["retry_after_ms"] == 10000.0);  // the three free hits are back at 10 s
    CHECK(d["retry_after"] == 10);
    REQUIRE(resp.note("slowDown"));
    CHECK(resp.note("slowDown")->rejected);
    CHECK(resp.note("slowDown")->retry_after == 10s);
  }
  CHECK(r.log[5].failure->details()["delay_ms"] == 4000.0);
  CHECK(r.log[5].failure->message() ==
        "slow_down refused the exchange: its delay of 4000ms would reach its deadline in 4000ms (key \"a\", hit 5). "
        "Retry after ~10000ms.");
  CHECK(r.log[6].failure->details()["hits"] == 6);
  // Refused requests still count: request 7 is hit 7.
  CHECK(r.log[7].note("slowDown")->used == 7);
  REQUIRE(r.events.rejected.size() == 2);
  CHECK(r.events.rejected[1]["delayMs"] == 9000.0);
  CHECK(r.events.rejected[1]["timeLeftMs"] == 5000.0);
  CHECK(r.events.rejected[1]["retryAfterMs"] == 10000.0);
}

TEST_CASE("a slow_down refusal answers each detail before its details are built as they would") {
  // Nobody reads the refusal before the copy (no subscriber): each name read from the unread copy
  // alone, a transport's own names included, is what the built details hold, or absent with them.
  std::optional<rc::error> refused;
  {
    rc::context ctx(rc::virtual_time);
    rc::spy<int> out;
    traffic_log log;
    auto script = burst(5);
    script[4].timeout = 4s;  // its delay would reach its deadline
    ctx.add(rc::craft().id("api").from(traffic(script, log)).slow_down(brief()).to(out));
    ctx.start();
    ctx.drain();
    ctx.stop();
    REQUIRE(log[5].refused());
    refused = *log[5].failure;
  }
  const rc::error unread = *refused;
  const nlohmann::json& built = refused->details();
  CHECK(built.contains("delay_ms"));
  rc::test::check_details_read_unbuilt(unread, built, {"label"});  // no label given
}

TEST_CASE("a caller that hangs up during its delay is dropped and nothing downstream runs") {
  slow_down_run r;
  rc::cancel_signal hang_up(r.ctx.clock());
  auto script = burst(5) + burst(1, 3s);
  script[4].abort = &hang_up;
  r.ctx.add(rc::craft().id("api").from(traffic(script, r.log)).slow_down(brief()).to(r.out));
  r.ctx.start();
  r.ctx.advance_to(rc::time_point{} + 2s);
  hang_up.fire();
  r.ctx.drain();

  CHECK(r.log[5].how == rc::outcome::kind::drop);
  CHECK(r.log[5].drop_reason == "client-gone");
  CHECK(r.log[5].answered == 2s);
  // Its hit stays counted: request 6, at 3 s, is hit 6 of the window and waits 9 s.
  CHECK(served_seconds(r.out, 6) == std::vector<double>{0, 0, 0, 1, -1, 12});
  CHECK(r.log[6].note("slowDown")->used == 6);
}

TEST_CASE("stopping the context ends every slow_down wait at once and the exchanges run") {
  slow_down_run r;
  r.ctx.add(rc::craft().id("api").from(traffic(burst(5), r.log)).slow_down({.delay = 5s}).to(r.out));
  r.ctx.start();
  r.ctx.advance_to(rc::time_point{} + 1s);
  r.ctx.stop();
  CHECK(served_seconds(r.out, 5) == std::vector<double>{0, 1, 1, 1, 1});
  REQUIRE(r.events.passed.size() == 5);
  CHECK(r.events.passed[4]["waited"] == true);
  CHECK(r.events.passed[4]["elapsed"] == 1000.0);
}

// ---- events, scopes ---------------------------------------------------------------------------

TEST_CASE("slow_down events carry hits, the delay, the key, the label and the scope") {
  slow_down_run r;
  auto options = brief();
  options.label = "per-client";
  r.run(burst(4), std::move(options));
  REQUIRE(r.events.passed.size() == 4);
  REQUIRE(r.events.delayed.size() == 1);

  const auto& delayed = r.events.delayed[0];
  CHECK(delayed["hits"] == 4);
  CHECK(delayed["delayMs"] == 1000.0);
  CHECK(delayed["delayAfter"] == 3);
  CHECK(delayed["key"] == "a");
  CHECK(delayed["label"] == "per-client");
  CHECK(delayed["scope"] == "step");
  CHECK(delayed["stepLabel"] == "to");
  CHECK(delayed["routeId"] == "api");
  CHECK(delayed.contains("exchangeId"));
  CHECK(delayed.contains("correlationId"));

  CHECK(r.events.passed[0]["waited"] == false);
  CHECK(r.events.passed[0]["delayMs"] == 0.0);
  CHECK(r.events.passed[3]["waited"] == true);
  CHECK(r.events.passed[3]["elapsed"] == 1000.0);
}

TEST_CASE("route-scope slow_down counts an exchange once however often retry runs the pipeline") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  traffic_log log;
  std::vector<nlohmann::json> passed;
  auto sub = ctx.on("route:slowDown:passed", [&](const rc::event& e) { passed.push_back(e.details); });
  int calls = 0;
  ctx.add(rc::craft()
              .id("api")
              .slow_down({.delay = 5s})
              .retry({.max_attempts = 2, .backoff = 0ms})
              .from(traffic(burst(2), log))
              .process([&](rc::exchange&) {
                if (++calls % 2 == 1) throw std::runtime_error("first attempt fails");
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(calls == 4);
  CHECK(served_seconds(out, 2) == std::vector<double>{0, 5});
  REQUIRE(passed.size() == 2);
  CHECK(passed[1]["hits"] == 2);
  CHECK(passed[1]["scope"] == "route");
  CHECK(passed[1]["stepLabel"] == "route");
}

TEST_CASE("step-scope slow_down under retry counts every attempt") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  traffic_log log;
  int calls = 0;
  ctx.add(rc::craft()
              .id("api")
              .from(traffic(burst(1), log))
              .retry({.max_attempts = 2, .backoff = 0ms})
              .slow_down({.delay = 5s})
              .process([&](rc::exchange&) {
                if (++calls == 1) throw std::runtime_error("first attempt fails");
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(calls == 2);
  CHECK(served_seconds(out, 1) == std::vector<double>{5});  // the second attempt was hit 2
}

TEST_CASE("a slow_down key selector that throws fails that exchange with RC5001 (retryable)") {
  slow_down_run r;
  auto options = brief();
  options.key = [](const rc::exchange&) -> std::string { throw std::runtime_error("no client"); };
  r.run(burst(1), std::move(options));
  REQUIRE(r.log[1].failure);
  CHECK(r.log[1].failure->code() == rc::errc::step_failed);
  CHECK(r.log[1].failure->retryable());
  CHECK_THAT(r.log[1].failure->message(), Catch::Contains("slow_down({ key })") && Catch::Contains("no client"));
  CHECK(r.out.count() == 0);
}

// ---- validation -------------------------------------------------------------------------------

namespace {

std::string rc5003_message(rc::slow_down_options options, bool route_scope) {
  try {
    if (route_scope) {
      (void)rc::craft().id("x").slow_down(std::move(options));
    } else {
      (void)rc::craft().id("x").from(rc::simple(1)).slow_down(std::move(options));
    }
  } catch (const rc::error& e) {
    CHECK(e.code() == rc::errc::misconfigured);
    return e.message();
  }
  FAIL("no RC5003");
  return {};
}

}  // namespace

TEST_CASE("slow_down rejects every invalid option at the call with RC5003 naming it") {
  const bool route_scope = GENERATE(true, false);
  CAPTURE(route_scope);
  auto check = [&](rc::slow_down_options o, const char* option, const char* value) {
    const auto msg = rc5003_message(std::move(o), route_scope);
    CHECK_THAT(msg, Catch::Contains(fmt::format("slow_down({{ {} }})", option)) && Catch::Contains(value));
  };
  check({.window = 0s}, "window", "got 0ms");
  check({.window = -1s}, "window", "got -1000ms");
  check({.delay_after = -1}, "delay_after", "got -1");
  check({.delay = -1s}, "delay", "got -1000ms");
  check({.delay = -0.5ms}, "delay", "got -0.5ms");
  check({.delay_after = 3, .delay = [](std::uint64_t hits) { return (static_cast<std::int64_t>(hits) - 5) * 1s; }},
        "delay", "got -1000ms at hit 4");
  check({.delay = [](std::uint64_t) -> std::chrono::seconds { throw std::runtime_error("bad rule"); }}, "delay",
        "bad rule");
  check({.max_delay = std::chrono::milliseconds(2147483648)}, "max_delay", "got 2147483648ms");
  check({.max_delay = -1ms}, "max_delay", "got -1ms");
  check({.max_keys = 0}, "max_keys", "got 0");
  check({.max_keys = 1000001}, "max_keys", "got 1000001");
  check({.counting = static_cast<rc::counting>(7)}, "counting", "got 7");
}

TEST_CASE("slow_down accepts a constant delay, a zero delay_after and the timer ceiling") {
  CHECK_NOTHROW(rc::craft().id("x").slow_down({.delay = 1500ms}));
  CHECK_NOTHROW(rc::craft().id("x").slow_down({.delay = 0ms}));
  CHECK_NOTHROW(rc::craft().id("x").slow_down({.delay_after = 0, .max_delay = rc::max_timer_wait}));
  CHECK_NOTHROW(rc::craft().id("x").slow_down({.delay = std::chrono::duration<double>(0.25)}));
}

// ---- bounded memory ---------------------------------------------------------------------------

namespace {

// Builds the route itself to keep a pointer to its (route-scope) gate.
struct gate_run {
  rc::context ctx{rc::virtual_time};
  rc::spy<int> out;
  traffic_log log;
  const rc::keyed_gate* gate = nullptr;

  void run(std::vector<request> script, rc::slow_down_options options) {
    auto def =
        rc::craft().id("api").slow_down(std::move(options)).from(traffic(std::move(script), log)).to(out).build();
    gate = dynamic_cast<const rc::keyed_gate*>(def.gates.at(0).get());
    REQUIRE(gate != nullptr);
    ctx.add(std::move(def));
    ctx.start();
    ctx.drain();
  }
};

}  // namespace

TEST_CASE("one key's memory does not grow with its traffic") {
  const auto counting = GENERATE(rc::counting::sliding, rc::counting::fixed);
  CAPTURE(rc::to_string(counting));
  gate_run one;
  one.run(burst(1), {.window = 10s, .delay_after = 1000000, .key = rc::by_header("x-client"), .counting = counting});
  gate_run many;
  std::vector<request> script;
  for (int i = 0; i < 20000; ++i) script.push_back({.at = i * 1ms});  // 20,000 hits in 20 s, one key
  many.run(script, {.window = 10s, .delay_after = 1000000, .key = rc::by_header("x-client"), .counting = counting});
  CHECK(many.out.count() == 20000);
  CHECK(many.gate->stats().keys == 1);
  CHECK(many.gate->stats().memory_bytes == one.gate->stats().memory_bytes);
}

TEST_CASE("keys beyond max_keys are forgotten once idle, or counted in the overflow sketch") {
  SECTION("20,000 clients one after another: idle keys make room, the table never grows past max_keys") {
    gate_run r;
    std::vector<request> script;
    for (int i = 0; i < 20000; ++i) script.push_back({.at = i * 10ms, .client = fmt::format("client-{}", i)});
    r.run(script, {.window = 1s, .key = rc::by_header("x-client"), .max_keys = 1000});
    CHECK(r.out.count() == 20000);
    CHECK(r.gate->stats().keys == 1000);
    CHECK(r.gate->stats().memory_bytes <= 1000 * 256);  // under 256 bytes per key, counters included
    for (const auto& resp : r.log.all()) CHECK(resp.note("slowDown")->used == 1);  // all fresh
  }
  SECTION("1,200 clients at once through 1,000 slots: the other 200 are counted in the sketch, each on its own") {
    const auto counting = GENERATE(rc::counting::sliding, rc::counting::fixed);
    CAPTURE(rc::to_string(counting));
    gate_run r;
    std::vector<request> script;
    for (int i = 0; i < 1'200; ++i) script.push_back({.client = fmt::format("client-{}", i)});
    // A new client, then one of the overflowed ones sending four more.
    script.push_back({.at = 1s, .client = "new"});
    for (int i = 0; i < 4; ++i) script.push_back({.at = 2s, .client = "client-1100"});
    r.run(script, {.window = 10s,
                   .delay_after = 3,
                   .max_delay = 1s,
                   .key = rc::by_header("x-client"),
                   .max_keys = 1000,
                   .counting = counting});
    CHECK(r.gate->stats().keys == 1000);
    // 4 rows of 1,024 counters (1,000 rounded up), one sketch per period kept.
    const std::size_t sketch_bytes = (counting == rc::counting::sliding ? 2 : 1) * 4 * 1024 * 4;
    CHECK(r.gate->stats().overflow_bytes == sketch_bytes);
    CHECK(r.gate->stats().memory_bytes <= 1000 * 256 + sketch_bytes);
    // One shared window made the 1,200th client hit 200 and delayed it 1 s; now each of the 200
    // overflowed clients has its own count, and so has a newcomer.
    int first_hits = 0;
    for (int id = 1; id <= 1'200; ++id) first_hits += r.log[id].note("slowDown")->used == 1 ? 1 : 0;
    CHECK(first_hits >= 1'198);
    CHECK(r.log[1'201].note("slowDown")->used == 1);
    CHECK(r.log[1'201].answered == 1s);
    // client-1100 overflowed: its hits 2..5, delayed past delay_after 3 as in the table.
    std::vector<std::uint64_t> used;
    for (int id = 1'202; id <= 1'205; ++id) used.push_back(r.log[id].note("slowDown")->used);
    CHECK(used == std::vector<std::uint64_t>{2, 3, 4, 5});
    CHECK(r.log[1'203].answered == 2s);
    CHECK(r.log[1'204].answered == 3s);  // hit 4: (4 - 3) x 1 s
    CHECK(r.log[1'205].answered == 3s);  // hit 5: 2 s, clamped by max_delay 1 s
  }
}

}  // namespace slow_down_test
