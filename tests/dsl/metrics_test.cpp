// Operational counters (context::snapshot()) and their Prometheus rendering, in virtual time:
// gates count what they decide, exactly; waits land in the histogram bucket of their length;
// readiness follows the context's life. The HTTP endpoints serving them: tests/components.
#include <algorithm>
#include <catch2/catch.hpp>
#include <rc/prometheus.hpp>
#include <rc/rc.hpp>
#include <string>
#include <vector>

#include "support/prometheus_check.hpp"

namespace metrics_test {

using namespace std::chrono_literals;

namespace {

std::vector<int> range(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

const rc::route_snapshot& route_of(const rc::context_snapshot& s, std::string_view id) {
  const auto it = std::find_if(s.routes.begin(), s.routes.end(), [&](const auto& r) { return r.id == id; });
  REQUIRE(it != s.routes.end());
  return *it;
}

// The cumulative count of bucket `le` (an upper bound of rc::gate_wait_bounds).
std::uint64_t bucket(const rc::gate_snapshot& g, double le) {
  const auto it = std::find(g.waits.bounds.begin(), g.waits.bounds.end(), le);
  REQUIRE(it != g.waits.bounds.end());
  return g.waits.cumulative[static_cast<std::size_t>(it - g.waits.bounds.begin())];
}

}  // namespace

TEST_CASE("metrics: a throttle in reject mode counts 3 passed and 2 rejected of 5 simultaneous exchanges") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("t")
              .throttle({.rate = 3, .mode = rc::throttle_mode::reject, .label = "global"})
              .from(rc::simple(range(5)))
              .to(out));
  ctx.start();
  ctx.drain();
  const auto s = ctx.snapshot();
  const auto& r = route_of(s, "t");
  REQUIRE(r.gates.size() == 1);
  const auto& g = r.gates[0];
  CHECK(g.id == "throttle#1");
  CHECK(g.kind == "throttle");
  CHECK(g.label == "global");
  CHECK(g.passed == 3);
  CHECK(g.rejected == 2);
  CHECK(g.delayed == 0);
  CHECK(g.waits.count == 3);
  CHECK(bucket(g, 0) == 3);  // none waited
  CHECK(g.waits.sum == 0);
  CHECK(out.bodies().size() == 3);
}

TEST_CASE("metrics: waits of a pacing throttle land in their buckets, and delayed ones count as passed too") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  // Rate 5: five at once, then one at 200 ms and one at 400 ms.
  ctx.add(rc::craft().id("t").from(rc::simple(range(7))).throttle({.rate = 5}).to(out));
  ctx.start();
  ctx.drain();
  const auto s = ctx.snapshot();
  const auto& g = route_of(s, "t").gates.at(0);
  CHECK(g.passed == 7);
  CHECK(g.delayed == 2);
  CHECK(g.rejected == 0);
  CHECK(bucket(g, 0) == 5);
  CHECK(bucket(g, 0.1) == 5);
  CHECK(bucket(g, 0.25) == 6);  // 200 ms
  CHECK(bucket(g, 0.5) == 7);   // 400 ms
  CHECK(bucket(g, 60) == 7);
  CHECK(g.waits.count == 7);
  CHECK(g.waits.sum == Approx(0.6));
}

TEST_CASE("metrics: every gate of a route is listed in chain order with its kind, and in flight follows the run") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("stack")
              .rate_limit({.limit = 2, .window = 10s})
              .throttle({.rate = 1})
              .from(rc::simple(range(3)))
              .to(out));
  ctx.start();
  ctx.advance(1ms);  // the first admitted; the second waits in the throttle, the third refused
  auto s = ctx.snapshot();
  const auto* r = &route_of(s, "stack");
  REQUIRE(r->gates.size() == 2);
  CHECK(r->gates[0].id == "rateLimit#1");
  CHECK(r->gates[0].kind == "rateLimit");
  CHECK(r->gates[0].passed == 2);
  CHECK(r->gates[0].rejected == 1);
  CHECK(r->gates[1].id == "throttle#1");
  CHECK(r->gates[1].passed == 1);
  CHECK(r->gates[1].delayed == 1);
  CHECK(r->in_flight == 1);  // the one waiting
  ctx.drain();
  s = ctx.snapshot();
  r = &route_of(s, "stack");
  CHECK(r->in_flight == 0);
  CHECK(r->gates[1].passed == 2);
  CHECK(bucket(r->gates[1], 1) == 2);  // waited 1 s exactly: in le="1"
  CHECK(bucket(r->gates[1], 0.5) == 1);
}

TEST_CASE("metrics: ready only once every route has started, and no longer once stop() is called") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft().id("a").from(rc::simple(range(1))).to(out));
  ctx.add(rc::craft().id("b").from(rc::timer({.interval = 1s})).to(rc::noop()));
  auto s = ctx.snapshot();
  CHECK_FALSE(s.started);
  CHECK_FALSE(s.ready);
  ctx.start();
  s = ctx.snapshot();  // the sources are posted, not yet run
  CHECK(s.started);
  CHECK_FALSE(route_of(s, "a").started);
  CHECK_FALSE(s.ready);
  ctx.advance(1ms);
  s = ctx.snapshot();
  CHECK(route_of(s, "a").started);
  CHECK(route_of(s, "b").started);
  CHECK(s.ready);  // a finite route that finished has still started
  bool ready_while_stopping = true;
  auto sub = ctx.on("context:stopping", [&](const rc::event&) { ready_while_stopping = ctx.snapshot().ready; });
  ctx.stop();
  CHECK_FALSE(ready_while_stopping);
  s = ctx.snapshot();
  CHECK(s.stopping);
  CHECK_FALSE(s.ready);
}

TEST_CASE("metrics: the Prometheus text is valid, and label values are escaped") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("odd \"route\"\\ with\nnewline")
              .throttle({.rate = 3, .mode = rc::throttle_mode::reject})
              .from(rc::simple(range(5)))
              .to(out));
  ctx.add(rc::craft().id("paced").from(rc::simple(range(7))).throttle({.rate = 5, .label = "p"}).to(out));
  ctx.start();
  ctx.drain();
  const std::string text = rc::prometheus_text(ctx);
  const auto p = rc::test::parse_prometheus(text);
  INFO(text);
  for (const auto& e : p.errors) FAIL_CHECK(e);
  CHECK(p.types.at("rc_gate_passed_total") == "counter");
  CHECK(p.types.at("rc_gate_wait_seconds") == "histogram");
  CHECK(p.types.at("rc_route_exchanges_in_flight") == "gauge");
  const std::string odd = R"(route="odd \"route\"\\ with\nnewline",gate="throttle#1",kind="throttle",label="")";
  CHECK(p.get("rc_gate_passed_total{" + odd + "}") == 3);
  CHECK(p.get("rc_gate_rejected_total{" + odd + "}") == 2);
  const std::string paced = R"(route="paced",gate="throttle#1",kind="throttle",label="p")";
  CHECK(p.get("rc_gate_delayed_total{" + paced + "}") == 2);
  CHECK(p.get("rc_gate_wait_seconds_bucket{" + paced + ",le=\"0\"}") == 5);
  CHECK(p.get("rc_gate_wait_seconds_bucket{" + paced + ",le=\"0.25\"}") == 6);
  CHECK(p.get("rc_gate_wait_seconds_bucket{" + paced + ",le=\"+Inf\"}") == 7);
  CHECK(p.get("rc_gate_wait_seconds_count{" + paced + "}") == 7);
  CHECK(p.get("rc_gate_wait_seconds_sum{" + paced + "}").value_or(-1) == Approx(0.6));
  CHECK(p.get("rc_route_exchanges_in_flight{route=\"paced\"}") == 0);
  CHECK(p.get("rc_ready") == 1);
}

}  // namespace metrics_test
