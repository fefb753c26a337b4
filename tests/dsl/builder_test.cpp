// The fluent builder (reference §1, §2, issue 2 item 2): stacking order, build-time errors,
// the body type flowing through the steps, and every step kind.
#include <algorithm>
#include <catch2/catch.hpp>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>

#include "support/dsl_support.hpp"

namespace builder_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;
using rc::test::in_ms;
using rc::test::rc_error;

namespace {

/// Wrapper events only (throttle, retry, delay), in order, with the throttle label when present.
std::vector<std::string> wrapper_trace(const event_recorder& events) {
  std::vector<std::string> out;
  for (const auto& e : events.all()) {
    if (e.name.rfind("route:throttle:", 0) != 0 && e.name.rfind("route:retry:", 0) != 0 &&
        e.name.rfind("route:delay:", 0) != 0)
      continue;
    std::string s = e.name.substr(6);  // drop "route:"
    if (e.details.contains("label")) s.append("(").append(e.details["label"].get<std::string>()).append(")");
    out.push_back(s);
  }
  return out;
}

struct fail_once {
  int* calls;
  void operator()(int&) const {
    if (++*calls == 1) throw std::runtime_error("first attempt fails");
  }
};

/// A destination recording the identity of what it receives (spy records the id only).
struct identity_capture final : rc::destination_base {
  struct seen_exchange {
    std::string id, correlation_id;
    int body;
  };
  std::shared_ptr<std::vector<seen_exchange>> seen = std::make_shared<std::vector<seen_exchange>>();
  std::string_view adapter() const override { return "capture"; }
  void send_now(rc::exchange& ex, rc::route_runtime&) override {
    seen->push_back({ex.id(), ex.correlation_id(), ex.body<int>()});
  }
};

}  // namespace

// ---- stacking -------------------------------------------------------------------------------

TEST_CASE("step wrappers stack outside-in in declaration order: retry then throttle re-enters the throttle") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  int calls = 0;
  ctx.add(rc::craft()
              .id("s")
              .from(rc::simple(1))
              .retry({.max_attempts = 2, .backoff = 0ms})
              .throttle({.rate = 100})
              .to(fail_once{&calls}));
  ctx.start();
  ctx.drain();
  CHECK(wrapper_trace(events) == std::vector<std::string>{"retry:started", "throttle:passed", "retry:attempt",
                                                          "throttle:passed", "retry:stopped"});
}

TEST_CASE("step wrappers stack outside-in in declaration order: throttle then retry admits once") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  int calls = 0;
  ctx.add(rc::craft()
              .id("s")
              .from(rc::simple(1))
              .throttle({.rate = 100})
              .retry({.max_attempts = 2, .backoff = 0ms})
              .to(fail_once{&calls}));
  ctx.start();
  ctx.drain();
  CHECK(wrapper_trace(events) ==
        std::vector<std::string>{"throttle:passed", "retry:started", "retry:attempt", "retry:stopped"});
}

TEST_CASE("three step wrappers nest in declaration order: delay, then throttle, then retry") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  int calls = 0;
  ctx.add(rc::craft()
              .id("s")
              .from(rc::simple(1))
              .delay(5ms)
              .throttle({.rate = 100, .label = "t"})
              .retry({.max_attempts = 2, .backoff = 0ms})
              .to(fail_once{&calls}));
  ctx.start();
  ctx.drain();
  CHECK(wrapper_trace(events) == std::vector<std::string>{"delay:started", "delay:stopped", "throttle:passed(t)",
                                                          "retry:started", "retry:attempt", "retry:stopped"});
}

TEST_CASE("route-scope throttles run in declaration order, outside the route-scope retry whatever the call order") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  int calls = 0;
  ctx.add(rc::craft()
              .id("s")
              .retry({.max_attempts = 2, .backoff = 0ms})  // declared first, still inside the gates
              .throttle({.rate = 100, .label = "first"})
              .throttle({.rate = 100, .label = "second"})
              .from(rc::simple(1))
              .to(fail_once{&calls}));
  ctx.start();
  ctx.drain();
  CHECK(wrapper_trace(events) == std::vector<std::string>{"throttle:passed(first)", "throttle:passed(second)",
                                                          "retry:started", "retry:attempt", "retry:stopped"});
}

TEST_CASE("a step wrapper covers only the next step: a failure in a later step is not retried") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  int transforms = 0, sends = 0;
  ctx.add(rc::craft()
              .id("s")
              .from(rc::simple(1))
              .retry({.max_attempts = 3, .backoff = 0ms})
              .transform([&](int v) {
                ++transforms;
                return v;
              })
              .to([&](int&) {
                ++sends;
                throw std::runtime_error("not covered");
              }));
  ctx.start();
  ctx.drain();
  CHECK(transforms == 1);
  CHECK(sends == 1);
  CHECK(events.count("route:retry:attempt") == 0);
  CHECK(events.count("route:exchange:failed") == 1);
}

TEST_CASE("a step throttle covers only the next step: its events name that step") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx, "route:throttle:passed");
  ctx.add(rc::craft().id("s").from(rc::simple(1)).throttle({.rate = 5}).transform([](int v) { return v + 1; }).to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(events.count("route:throttle:passed") == 1);
  CHECK(events.all()[0].details["stepLabel"] == "transform");
  CHECK(out.bodies() == std::vector<int>{2});
}

TEST_CASE("every wrapper event carries a gateId telling two wrappers of one kind apart") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  // Declaration order: route scope first, then the steps, outermost wrapper first.
  ctx.add(rc::craft()
              .id("ids")
              .throttle({.rate = 100, .label = "outer"})
              .retry({.max_attempts = 2, .backoff = 0ms})
              .from(rc::simple(1))
              .throttle({.rate = 50})
              .delay(0ms)
              .transform([](int v) { return v + 1; })
              .throttle({.rate = 10})
              .retry({.max_attempts = 3})
              .to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(out.bodies() == std::vector<int>{2});
  std::vector<std::pair<std::string, std::string>> seen;  // (event, gateId), first of each gate
  for (const auto& e : events.all()) {
    if (!e.details.contains("gateId")) continue;
    const auto id = e.details["gateId"].get<std::string>();
    if (std::none_of(seen.begin(), seen.end(), [&](const auto& p) { return p.second == id; }))
      seen.emplace_back(std::string(e.name), id);
  }
  CHECK(seen == std::vector<std::pair<std::string, std::string>>{{"route:throttle:passed", "throttle#1"},
                                                                 {"route:retry:started", "retry#1"},
                                                                 {"route:throttle:passed", "throttle#2"},
                                                                 {"route:delay:started", "delay#1"},
                                                                 {"route:throttle:passed", "throttle#3"},
                                                                 {"route:retry:started", "retry#2"}});
  // Label and gateId sit side by side; the id is there without a label too.
  for (const auto& e : events.all())
    if (e.details.value("gateId", "") == "throttle#1") CHECK(e.details["label"] == "outer");
}

// ---- build-time errors ---------------------------------------------------------------------

TEST_CASE("a wrapper with no step after it is RC2001 at build, naming the wrapper") {
  auto b = rc::craft().id("dangling").from(rc::simple(1)).to(rc::noop()).retry();
  CHECK_THROWS_MATCHES(std::move(b).build(), rc::error, rc_error(rc::errc::invalid_dsl, "retry()"));
}

TEST_CASE("a dangling wrapper is RC2001 when the route is added to a context") {
  rc::context ctx(rc::virtual_time);
  CHECK_THROWS_MATCHES(ctx.add(rc::craft().id("dangling").from(rc::simple(1)).throttle({.rate = 1})), rc::error,
                       rc_error(rc::errc::invalid_dsl, "throttle()"));
  CHECK(ctx.routes().empty());
}

TEST_CASE("a route without from() is RC2002 at build") {
  CHECK_THROWS_MATCHES(rc::craft().id("nowhere").build(), rc::error, rc_error(rc::errc::missing_from, "from()"));
  rc::context ctx(rc::virtual_time);
  CHECK_THROWS_MATCHES(ctx.add(rc::craft().id("nowhere").throttle({.rate = 1})), rc::error,
                       rc_error(rc::errc::missing_from, "nowhere"));
}

TEST_CASE("a route option after from() is RC2001") {
  auto b = rc::craft().from(rc::simple(1));
  CHECK_THROWS_MATCHES(std::move(b).id("late"), rc::error, rc_error(rc::errc::invalid_dsl, "id()"));
}

TEST_CASE("an engine header key in header() is RC5003 at build") {
  auto b = rc::craft().id("h").from(rc::simple(1));
  CHECK_THROWS_MATCHES(std::move(b).header("routecraft.route", "x"), rc::error,
                       rc_error(rc::errc::misconfigured, "routecraft.route"));
  auto c = rc::craft().id("h").from(rc::simple(1));
  CHECK_THROWS_MATCHES(std::move(c).header("", 1), rc::error, rc_error(rc::errc::misconfigured, "header({ key })"));
}

TEST_CASE("a route without an id gets a unique one") {
  auto a = rc::craft().from(rc::simple(1)).to(rc::noop()).build();
  auto b = rc::craft().from(rc::simple(1)).to(rc::noop()).build();
  CHECK_FALSE(a.id.empty());
  CHECK(a.id != b.id);
}

TEST_CASE("title and description are kept on the route definition") {
  auto def = rc::craft()
                 .id("x")
                 .title("Orders")
                 .description("Turns orders into invoices")
                 .from(rc::simple(1))
                 .to(rc::noop())
                 .build();
  CHECK(def.id == "x");
  CHECK(def.title == "Orders");
  CHECK(def.description == "Turns orders into invoices");
}

// ---- body type and steps ----------------------------------------------------------------------

TEST_CASE("the body type flows through transforms: int to std::string to size_t") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::size_t> out;
  ctx.add(rc::craft()
              .id("types")
              .from(rc::simple(std::vector<int>{7, 1234}))
              .transform([](int v) { return std::to_string(v); })
              .transform([](const std::string& s) { return s.size(); })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<std::size_t>{1, 4});
}

TEST_CASE("a transform may take the exchange as well as the body") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  ctx.add(rc::craft()
              .id("types")
              .from(rc::simple(5))
              .header("unit", "kg")
              .transform([](int v, rc::exchange& ex) { return std::to_string(v) + ex.header_or("unit", "?"); })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<std::string>{"5kg"});
}

TEST_CASE("process works on the whole exchange in place: body and headers") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("p")
              .from(rc::simple(20))
              .process([](rc::exchange& ex) {
                ex.body<int>() += 1;
                ex.set_header("seen", true);
              })
              .to(out));
  ctx.start();
  ctx.drain();
  const auto received = out.received();
  REQUIRE(received.size() == 1);
  CHECK(received[0].body == 21);
  REQUIRE(received[0].headers.find("seen") != nullptr);
  CHECK(*received[0].headers.find("seen") == true);
}

TEST_CASE("filter keeps what matches and drops the rest with reason filtered") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx, "route:exchange:dropped");
  ctx.add(rc::craft()
              .id("f")
              .from(rc::simple(std::vector<int>{1, 2, 3, 4}))
              .filter([](const int& v) { return v % 2 == 0; })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{2, 4});
  const auto dropped = events.all();
  REQUIRE(dropped.size() == 2);
  for (const auto& d : dropped) CHECK(d.details["reason"] == "filtered");
}

TEST_CASE("a throwing filter predicate fails the exchange with RC5001") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:failed");
  ctx.add(rc::craft()
              .id("f")
              .from(rc::simple(1))
              .filter([](const int&) -> bool { throw std::runtime_error("nope"); })
              .to(rc::noop()));
  ctx.start();
  ctx.drain();
  REQUIRE(events.count("route:exchange:failed") == 1);
  const auto err = events.all()[0].details["error"];
  CHECK(err["code"] == "RC5001");
  CHECK(err["message"].get<std::string>().find("Filter predicate threw") != std::string::npos);
}

TEST_CASE("header sets a fixed value or the value a function computes from the exchange") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("h")
              .from(rc::simple(3))
              .header("tenant", "acme")
              .header("double", [](const rc::exchange& ex) { return ex.body<int>() * 2; })
              .to(out));
  ctx.start();
  ctx.drain();
  const auto received = out.received();
  REQUIRE(received.size() == 1);
  CHECK(*received[0].headers.find("tenant") == "acme");
  CHECK(*received[0].headers.find("double") == 6);
}

TEST_CASE("tap sends a copy with a fresh id and the same correlation, drain waits for it") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  identity_capture tapped;
  ctx.add(rc::craft().id("t").from(rc::simple(9)).tap(tapped).transform([](int v) { return v + 1; }).to(out));
  ctx.start();
  ctx.drain();
  const auto originals = out.received();
  REQUIRE(tapped.seen->size() == 1);
  REQUIRE(originals.size() == 1);
  const auto& copy = (*tapped.seen)[0];
  CHECK(copy.body == 9);  // the copy was taken before the transform
  CHECK(originals[0].body == 10);
  CHECK(copy.id != originals[0].exchange_id);
  CHECK(copy.correlation_id == originals[0].exchange_id);  // the original's correlation is its own id
}

TEST_CASE("to(function) returning the body type replaces the body, returning nothing keeps it") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  int seen = 0;
  ctx.add(
      rc::craft().id("fn").from(rc::simple(4)).to([](int& v) { return v * 10; }).to([&](int& v) { seen = v; }).to(out));
  ctx.start();
  ctx.drain();
  CHECK(seen == 40);
  CHECK(out.bodies() == std::vector<int>{40});
}

}  // namespace builder_test
