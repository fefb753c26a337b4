// Built-in components (reference §11, issue 2 item 9): sources simple, sequence, generate, timer
// and direct; destinations log, noop and spy. Virtual time throughout.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <optional>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"

namespace components_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;
using rc::test::in_ms;
using rc::test::rc_error;

// ---- simple, sequence, generate ---------------------------------------------------------------

TEST_CASE("simple(values) starts every exchange at once") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft().id("s").from(rc::simple(std::vector<int>{1, 2, 3})).delay(10ms).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{1, 2, 3});
  CHECK(in_ms(out.times()) == std::vector<double>{10, 10, 10});
}

TEST_CASE("simple(values) lets other work run while it starts a large batch") {
  // Two routes start 300 exchanges each. A source that started all of its batch before yielding
  // would hold the thread (and every timer due meanwhile) for the whole batch; simple() gives
  // way every 128 exchanges, so the two batches interleave.
  rc::context ctx(rc::virtual_time);
  std::vector<char> order;
  const auto record = [&order](char route) { return [&order, route](int) { order.push_back(route); }; };
  std::vector<int> values(300);
  ctx.add(rc::craft().id("a").from(rc::simple(values)).to(record('a')));
  ctx.add(rc::craft().id("b").from(rc::simple(values)).to(record('b')));
  ctx.start();
  ctx.drain();
  REQUIRE(order.size() == 600);
  std::size_t longest = 0;
  for (std::size_t i = 0, run = 0; i < order.size(); ++i) {
    run = i > 0 && order[i] == order[i - 1] ? run + 1 : 1;
    longest = std::max(longest, run);
  }
  CHECK(longest <= 128);
}

TEST_CASE("simple(value) emits exactly one exchange") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  event_recorder events(ctx, "route:exchange:started");
  ctx.add(rc::craft().id("s").from(rc::simple(std::string("one"))).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<std::string>{"one"});
  CHECK(events.count("route:exchange:started") == 1);
}

TEST_CASE("sequence(values) runs one exchange at a time, each after the previous one finished") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft().id("s").from(rc::sequence(std::vector<int>{1, 2, 3})).delay(10ms).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{1, 2, 3});
  CHECK(in_ms(out.times()) == std::vector<double>{10, 20, 30});
}

TEST_CASE("generate(fn) emits what fn returns, one at a time, until it returns nullopt") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  int next = 0;
  ctx.add(rc::craft()
              .id("g")
              .from(rc::generate([&]() -> std::optional<int> {
                if (next == 4) return std::nullopt;
                return next++ * 10;
              }))
              .delay(5ms)
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{0, 10, 20, 30});
  CHECK(in_ms(out.times()) == std::vector<double>{5, 10, 15, 20});
}

// ---- timer ---------------------------------------------------------------------------------------

TEST_CASE("timer ticks count times, interval apart, with a 1-based counter") {
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::tick> out;
  ctx.add(rc::craft().id("t").from(rc::timer({.interval = 100ms, .count = 3})).to(out));
  ctx.start();
  ctx.drain();
  const auto received = out.received();
  REQUIRE(received.size() == 3);
  CHECK(in_ms(out.times()) == std::vector<double>{0, 100, 200});
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(received[i].body.counter == i + 1);
    CHECK(received[i].body.fired_at == received[i].at);
    CHECK(*received[i].headers.find("routecraft.timer.counter") == i + 1);
    CHECK(*received[i].headers.find("routecraft.timer.periodMs") == 100.0);
  }
}

TEST_CASE("timer waits its initial delay before the first tick") {
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::tick> out;
  ctx.add(rc::craft().id("t").from(rc::timer({.interval = 100ms, .delay = 50ms, .count = 3})).to(out));
  ctx.start();
  ctx.drain();
  CHECK(in_ms(out.times()) == std::vector<double>{50, 150, 250});
}

TEST_CASE("timer without fixed_rate schedules the next tick interval after the previous run ends") {
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::tick> out;
  ctx.add(rc::craft().id("t").from(rc::timer({.interval = 100ms, .count = 3})).delay(30ms).to(out));
  ctx.start();
  ctx.drain();
  std::vector<double> fired;
  for (const auto& r : out.received()) fired.push_back(rc::to_ms(r.body.fired_at));
  CHECK(fired == std::vector<double>{0, 130, 260});
  CHECK(in_ms(out.times()) == std::vector<double>{30, 160, 290});
}

TEST_CASE("timer with fixed_rate keeps its ticks on the grid whatever the run takes") {
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::tick> out;
  ctx.add(rc::craft().id("t").from(rc::timer({.interval = 100ms, .count = 3, .fixed_rate = true})).delay(30ms).to(out));
  ctx.start();
  ctx.drain();
  std::vector<double> fired;
  for (const auto& r : out.received()) fired.push_back(rc::to_ms(r.body.fired_at));
  CHECK(fired == std::vector<double>{0, 100, 200});
}

TEST_CASE("a timer with no count ticks until the context stops") {
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::tick> out;
  ctx.add(rc::craft().id("t").from(rc::timer({.interval = 100ms})).to(out));
  ctx.start();
  ctx.advance(350ms);
  CHECK(in_ms(out.times()) == std::vector<double>{0, 100, 200, 300});
  ctx.stop();
  ctx.advance(1s);
  CHECK(out.count() == 4);
}

TEST_CASE("timer rejects a zero interval and a negative delay with RC5003") {
  CHECK_THROWS_MATCHES(rc::timer({.interval = 0ms}), rc::error,
                       rc_error(rc::errc::misconfigured, "timer({ interval })"));
  CHECK_THROWS_MATCHES(rc::timer({.delay = -1ms}), rc::error, rc_error(rc::errc::misconfigured, "timer({ delay })"));
}

// ---- direct ----------------------------------------------------------------------------------------

TEST_CASE("direct request/reply makes the endpoint route's final body the caller's body") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  ctx.add(rc::craft().id("pricing").from(rc::direct<int>("pricing")).transform([](int v) {
    return "EUR " + std::to_string(v * 2);
  }));
  ctx.add(rc::craft().id("caller").from(rc::simple(21)).request<std::string>(rc::direct<int>("pricing")).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<std::string>{"EUR 42"});
}

TEST_CASE("to(direct) runs the endpoint route and leaves the caller's body unchanged") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> endpoint, out;
  ctx.add(rc::craft().id("audit").from(rc::direct<int>("audit")).transform([](int v) { return v + 100; }).to(endpoint));
  ctx.add(rc::craft().id("caller").from(rc::simple(std::vector<int>{1, 2})).to(rc::direct<int>("audit")).to(out));
  ctx.start();
  ctx.drain();
  CHECK(endpoint.bodies() == std::vector<int>{101, 102});
  CHECK(out.bodies() == std::vector<int>{1, 2});
}

TEST_CASE("a failure in the direct endpoint's route fails the caller with the same error") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx, "route:exchange:failed");
  ctx.add(rc::craft().id("strict").from(rc::direct<int>("strict")).to([](int&) {
    throw rc::error(rc::errc::validation, "amount must be positive");
  }));
  ctx.add(rc::craft().id("caller").from(rc::simple(-1)).to(rc::direct<int>("strict")).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.count() == 0);
  const auto failed = events.all();
  REQUIRE(failed.size() == 2);  // the endpoint's run and the caller's run
  for (const auto& f : failed) {
    CHECK(f.details["error"]["code"] == "RC5002");
    CHECK(f.details["error"]["message"] == "amount must be positive");
  }
  CHECK(failed[1].details["routeId"] == "caller");
}

TEST_CASE("sending to a direct endpoint nobody serves is RC5004") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:failed");
  ctx.add(rc::craft().id("caller").from(rc::simple(1)).to(rc::direct<int>("nobody")));
  ctx.start();
  ctx.drain();
  REQUIRE(events.count("route:exchange:failed") == 1);
  CHECK(events.all()[0].details["error"]["code"] == "RC5004");
  CHECK(events.all()[0].details["error"]["message"].get<std::string>().find("nobody") != std::string::npos);
}

TEST_CASE("a direct call carries the caller's headers and correlation id to the endpoint") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> endpoint, out;
  ctx.add(rc::craft().id("ep").from(rc::direct<int>("ep")).to(endpoint));
  ctx.add(rc::craft().id("caller").from(rc::simple(1)).header("tenant", "acme").to(rc::direct<int>("ep")).to(out));
  ctx.start();
  ctx.drain();
  const auto at_endpoint = endpoint.received();
  REQUIRE(at_endpoint.size() == 1);
  CHECK(*at_endpoint[0].headers.find("tenant") == "acme");
  REQUIRE(out.count() == 1);
  CHECK(at_endpoint[0].exchange_id != out.received()[0].exchange_id);
}

// ---- log, noop, spy ----------------------------------------------------------------------------------

TEST_CASE("log writes one line per exchange with the route id and the body") {
  std::FILE* sink = std::tmpfile();
  REQUIRE(sink != nullptr);
  {
    rc::context ctx(rc::virtual_time);
    ctx.add(
        rc::craft().id("logged").from(rc::simple(std::vector<int>{7, 8, 9})).to(rc::log_destination("orders", sink)));
    ctx.start();
    ctx.drain();
  }
  std::fflush(sink);
  std::rewind(sink);
  std::vector<std::string> lines;
  char buf[512];
  while (std::fgets(buf, sizeof buf, sink)) lines.emplace_back(buf);
  std::fclose(sink);
  REQUIRE(lines.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    INFO(lines[i]);
    CHECK(lines[i].rfind("orders [logged] ", 0) == 0);
    CHECK(lines[i].find(std::string(" ").append(std::to_string(7 + i)).append("\n")) != std::string::npos);
  }
}

TEST_CASE("noop accepts every exchange and the exchanges complete") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:completed");
  ctx.add(rc::craft().id("n").from(rc::simple(std::vector<int>{1, 2, 3})).to(rc::noop()));
  ctx.start();
  ctx.drain();
  CHECK(events.count("route:exchange:completed") == 3);
}

TEST_CASE("spy records bodies, headers, exchange ids and virtual arrival times, reset clears it") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder started(ctx, "route:exchange:started");
  ctx.add(rc::craft()
              .id("s")
              .from(rc::test::arrivals({0ms, 25ms, 25ms, 1s}))
              .header("n", [](const rc::exchange& ex) { return ex.body<int>(); })
              .to(out));
  ctx.start();
  ctx.drain();
  const auto received = out.received();
  REQUIRE(received.size() == 4);
  CHECK(out.bodies() == std::vector<int>{0, 1, 2, 3});
  CHECK(in_ms(out.times()) == std::vector<double>{0, 25, 25, 1000});
  const auto ids = started.all();
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(*received[i].headers.find("n") == static_cast<int>(i));
    CHECK(received[i].exchange_id == ids[i].details["exchangeId"]);
  }
  out.reset();
  CHECK(out.count() == 0);
}

}  // namespace components_test
