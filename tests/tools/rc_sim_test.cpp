// rc-sim's pieces: scenario validation (JSON paths, the engine's own rules), what the runner records
// from the real gates, and byte-identical outputs. The command line itself is covered by the ctest
// commands in tools/CMakeLists.txt (goldens, exit codes, a million requests).
#include <catch2/catch.hpp>
#include <sstream>

#include "chart.hpp"
#include "delay_expression.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "scenario.hpp"

using namespace std::chrono_literals;
using rc::sim::gate_outcome;
using rc::sim::request_outcome;

namespace {

rc::sim::scenario parse(const std::string& text) {
  auto s = rc::sim::parse_scenario(nlohmann::json::parse(text), "test");
  rc::sim::check_scenario(s);
  return s;
}

/// The message a refused scenario gets ("" when it is accepted).
std::string refusal(const std::string& text) {
  try {
    (void)parse(text);
  } catch (const rc::sim::scenario_error& e) {
    return e.what();
  }
  return "";
}

std::string gates(const std::string& list) { return R"({"traffic": [{"at_ms": 0}], "gates": [)" + list + "]}"; }

double ms(rc::duration d) { return rc::to_ms(d); }
double ms(rc::time_point t) { return rc::to_ms(t); }

std::string all_outputs(const rc::sim::scenario& s) {
  const auto report = rc::sim::run_scenario(s);
  const auto sum = rc::sim::summarize(s, report);
  std::ostringstream out;
  rc::sim::write_table(out, s, report, sum, true);
  rc::sim::write_csv(out, s, report);
  rc::sim::write_json(out, s, report, sum);
  rc::sim::write_svg(out, s, report, sum);
  return out.str();
}

const char* stacked = R"({
  "gates": [
    {"gate": "slow_down", "scope": "step", "window_ms": 10000, "delay_after": 3,
     "delay_ms": "(hits - 3)^2 * 1000", "max_delay_ms": 20000, "counting": "fixed", "key": "client"},
    {"gate": "rate_limit", "scope": "step", "limit": 7, "window_ms": 30000,
     "headers": "draft-6", "counting": "fixed", "key": "client"}],
  "traffic": [{"at_ms": 0, "count": 8, "key": "a", "client_timeout_ms": 60000}]})";

}  // namespace

TEST_CASE("format_ms prints milliseconds to the microsecond without floating point") {
  CHECK(rc::sim::format_ms(0ns) == "0");
  CHECK(rc::sim::format_ms(1500ms) == "1500");
  CHECK(rc::sim::format_ms(250us) == "0.25");
  CHECK(rc::sim::format_ms(rc::duration(1'140'882'819)) == "1140.883");
  CHECK(rc::sim::format_ms(-3ms) == "-3");
  CHECK(rc::sim::format_ms(rc::duration(400)) == "0");
}

TEST_CASE("a delay expression is milliseconds as arithmetic in hits") {
  const rc::sim::delay_expression quadratic("(hits - 3)^2 * 1000", "gates[0].delay_ms");
  CHECK(quadratic(4) == 1s);
  CHECK(quadratic(8) == 25s);
  const rc::sim::delay_expression exponential("2^(hits - 2) * 1000", "gates[0].delay_ms");
  CHECK(exponential(5) == 8s);
}

TEST_CASE("a scenario the engine refuses names the JSON path of the option") {
  // The rules are the engine's validate(): the message after the path is the engine's own.
  CHECK(refusal(gates(R"({"gate": "throttle", "rate": 5}, {"gate": "slow_down", "delay_after": -1})")) ==
        "gates[1].delay_after: must be an integer >= 0, got -1");
  CHECK(refusal(gates(R"({"gate": "throttle", "rate": 0})")) == "gates[0].rate: must be a finite number > 0, got 0");
  CHECK(refusal(gates(R"({"gate": "throttle", "rate": 5, "burst": -1})")) ==
        "gates[0].burst: must be a finite number > 0, got -1");
  CHECK(refusal(gates(R"({"gate": "throttle", "rate": 5, "max_keys": 0})")) ==
        "gates[0].max_keys: must be an integer in [1, 1000000], got 0");
  CHECK(refusal(gates(R"({"gate": "slow_down", "window_ms": 0})")) ==
        "gates[0].window_ms: must be a duration > 0, got 0ms");
  CHECK(refusal(gates(R"({"gate": "slow_down", "max_delay_ms": 3000000000})")) ==
        "gates[0].max_delay_ms: must be a duration in [0, 2147483647ms] (the timer ceiling), got 3000000000ms");
  CHECK(refusal(gates(R"({"gate": "slow_down", "delay_ms": -5})")) ==
        "gates[0].delay_ms: must be a duration >= 0, got -5ms");
  CHECK(refusal(gates(R"({"gate": "slow_down", "delay_after": 3, "delay_ms": "(hits - 10) * 1000"})")) ==
        "gates[0].delay_ms: must be a duration >= 0 for every delayed hit, got -6000ms at hit 4");
  CHECK(refusal(gates(R"({"gate": "rate_limit", "limit": -1})")) == "gates[0].limit: must be an integer >= 0, got -1");
  CHECK(refusal(gates(R"({"gate": "rate_limit", "status": 200})")) ==
        "gates[0].status: must be an HTTP error status in [400, 599], got 200");
  CHECK(refusal(gates(R"({"gate": "retry", "max_attempts": 0})")) ==
        "gates[0].max_attempts: must be an integer >= 1, got 0");
  CHECK(refusal(gates(R"({"gate": "retry", "jitter": 2})")) ==
        "gates[0].jitter: must be jitter::none, jitter::full or a number in [0, 1], got 2");
  CHECK(refusal(gates(R"({"gate": "delay", "delay_ms": -1})")) ==
        "gates[0].delay_ms: must be a duration >= 0, got -1ms");
  CHECK(refusal(gates(R"({"gate": "delay", "scope": "route", "delay_ms": 1})"))
            .starts_with("gates[0].scope: delay() has no route scope"));
}

TEST_CASE("a malformed scenario is refused before the engine sees it, with the JSON path") {
  CHECK(
      refusal(gates(R"({"gate": "throttel"})")) ==
      R"(gates[0].gate: unknown gate "throttel" (expected "throttle", "slow_down", "rate_limit", "retry" or "delay"))");
  CHECK(refusal(gates(R"({"rate": 5})")).starts_with("gates[0].gate: missing"));
  CHECK(refusal(gates(R"({"gate": "throttle", "rate": 5, "rat": 3})"))
            .starts_with("gates[0].rat: unknown option for throttle"));
  CHECK(refusal(gates(R"({"gate": "throttle", "rate": "fast"})")) == R"(gates[0].rate: must be a number, got "fast")");
  CHECK(refusal(gates(R"({"gate": "throttle", "rate": 5, "per": "fortnight"})")) ==
        R"(gates[0].per: must be "second", "minute", "hour" or "day", got "fortnight")");
  CHECK(refusal(gates(R"({"gate": "slow_down", "window_ms": "10 sec"})"))
            .starts_with(R"(gates[0].window_ms: malformed time "10 sec")"));
  CHECK(refusal(gates(R"({"gate": "slow_down", "delay_ms": "hits * x"})"))
            .starts_with(R"(gates[0].delay_ms: cannot read the delay expression "hits * x")"));
  CHECK(refusal(gates(R"({"gate": "rate_limit", "headers": ["draft-7", "draft-10"]})"))
            .starts_with("gates[0].headers[1]: must be"));
  CHECK(refusal(gates(R"({"gate": "rate_limit", "key": "x-tenant"})"))
            .starts_with(R"(gates[0].key: no traffic entry sends header "x-tenant")"));
  CHECK(refusal(gates(R"({"gate": "retry", "scope": "route"}, {"gate": "retry", "scope": "route"})"))
            .starts_with("gates[1]: a second route-scope retry"));
  CHECK(
      refusal(gates(R"({"gate": "throttle", "rate": 1, "label": "x"}, {"gate": "throttle", "rate": 2, "label": "x"})"))
          .starts_with(R"(gates[1].label: "x" names another gate too)"));
  CHECK(refusal(R"({"gates": [], "traffic": [{"at_ms": "soon"}]})")
            .starts_with(R"(traffic[0].at_ms: malformed time "soon")"));
  CHECK(refusal(R"({"traffic": [{"at_ms": 0, "count": 0}]})") == "traffic[0].count: must be an integer >= 1, got 0");
  CHECK(refusal(R"({"traffic": [{"at_ms": -1}]})") == "traffic[0].at_ms: must be >= 0, got -1");
  CHECK(refusal(R"({"traffic": [{"at_ms": 0, "client_timeout_ms": 0}]})") ==
        "traffic[0].client_timeout_ms: must be > 0, got 0");
  CHECK(refusal(R"({"traffic": []})") == "traffic: must be a non-empty array, got []");
  CHECK(refusal(R"({"traffic": [{"at_ms": 0}], "sevice_ms": 5})")
            .starts_with("sevice_ms: unknown option for a scenario"));
}

TEST_CASE("times take a unit when written as strings") {
  const auto s = parse(R"({"service_ms": "1.5s", "traffic": [{"at_ms": "2m", "spacing_ms": "250ms", "count": 2}]})");
  CHECK(s.service == 1500ms);
  CHECK(s.traffic[0].at == 120s);
  CHECK(s.traffic[0].spacing == 250ms);
}

TEST_CASE("the stacked brief: the eighth request waits out its slow-down and is then refused by the limit") {
  const auto s = parse(stacked);
  const auto r = rc::sim::run_scenario(s);
  REQUIRE(r.requests.size() == 8);
  const double waits[] = {0, 0, 0, 1000, 4000, 9000, 16000, 20000};  // (hit - 3)^2 s, capped at 20 s
  for (std::size_t i = 0; i < 8; ++i) {
    const auto& q = r.requests[i];
    CAPTURE(i);
    REQUIRE(q.passes.size() >= 2);
    CHECK(q.passes[0].hit == i + 1);
    CHECK(ms(q.passes[0].wait) == waits[i]);
    CHECK(q.passes[1].hit == i + 1);  // the limiter counts it when it gets there
    CHECK(ms(q.passes[1].at) == waits[i]);
  }
  const auto& eighth = r.requests[7];
  CHECK(eighth.passes[1].outcome == gate_outcome::rejected);
  CHECK(eighth.outcome == request_outcome::refused);
  CHECK(eighth.status == 429);
  CHECK(ms(eighth.ended) == 20000);
  REQUIRE(eighth.retry_after);
  CHECK(ms(*eighth.retry_after) == 10000);  // the limiter's window opened at 0 and lasts 30 s
  CHECK(eighth.headers.back() == std::pair<std::string, std::string>{"Retry-After", "10"});
  CHECK(r.requests[6].outcome == request_outcome::served);
  CHECK(r.requests[6].headers[2] == std::pair<std::string, std::string>{"RateLimit-Remaining", "0"});
  // Windows as the gates reported them: slow_down's 10 s and rate_limit's 30 s, both from 0.
  REQUIRE(r.windows.size() == 2);
  CHECK(ms(r.windows[0].to) + ms(r.windows[1].to) == 40000);
}

TEST_CASE("keyed, a heavy client slows only itself, unkeyed, everyone waits behind it") {
  auto text = [](const char* key) {
    return fmt::format(R"({{"gates": [{{"gate": "slow_down", "window_ms": 10000, "delay_after": 2,
        "delay_ms": "(hits - 2) * 500", "counting": "fixed"{}}}],
      "traffic": [{{"at_ms": 0, "count": 8, "key": "heavy"}}, {{"at_ms": 1000, "count": 2, "spacing_ms": 500, "key": "light"}}]}})",
                       key);
  };
  const auto keyed = rc::sim::run_scenario(parse(text(R"(, "key": "client")")));
  const auto shared = rc::sim::run_scenario(parse(text("")));
  CHECK(ms(keyed.requests[8].total_wait()) == 0);
  CHECK(ms(keyed.requests[9].total_wait()) == 0);
  CHECK(ms(shared.requests[8].total_wait()) == 3500);  // hit 9
  CHECK(ms(shared.requests[9].total_wait()) == 4000);  // hit 10
  CHECK(keyed.keys == std::vector<std::string>{"heavy", "light"});
}

TEST_CASE("a client that times out while the throttle holds it is abandoned at its timeout") {
  const auto s = parse(R"({"gates": [{"gate": "throttle", "rate": 1, "burst": 1}],
    "traffic": [{"at_ms": 0, "count": 3, "key": "a", "client_timeout_ms": 1500}]})");
  const auto r = rc::sim::run_scenario(s);
  CHECK(r.requests[0].outcome == request_outcome::served);
  CHECK(r.requests[1].outcome == request_outcome::served);  // waited 1 s
  CHECK(ms(r.requests[1].ended) == 1000);
  CHECK(r.requests[2].outcome == request_outcome::abandoned);  // would have waited 2 s
  CHECK(ms(r.requests[2].ended) == 1500);
  CHECK(r.requests[2].passes[0].outcome == gate_outcome::abandoned);
  CHECK(ms(r.requests[2].passes[0].wait) == 1500);
  CHECK(r.requests[2].status == 0);
}

TEST_CASE("a slow-down that would outlast the client's timeout refuses at once") {
  const auto s = parse(
      R"({"gates": [{"gate": "slow_down", "window_ms": 60000, "delay_after": 1, "delay_ms": 5000, "key": "client"}],
    "traffic": [{"at_ms": 0, "count": 2, "key": "a", "client_timeout_ms": 3000}]})");
  const auto r = rc::sim::run_scenario(s);
  CHECK(r.requests[1].outcome == request_outcome::refused);
  CHECK(ms(r.requests[1].ended) == 0);
  CHECK(r.requests[1].passes[0].outcome == gate_outcome::rejected);
  CHECK(r.requests[1].passes[0].hit == 2);
}

TEST_CASE("two throttles without labels are told apart by where they stand in the chain") {
  const auto s = parse(R"({"gates": [
      {"gate": "throttle", "scope": "route", "rate": 2, "burst": 1},
      {"gate": "retry", "max_attempts": 3, "backoff_ms": 100},
      {"gate": "throttle", "rate": 1, "burst": 1, "mode": "reject"}],
    "traffic": [{"at_ms": 0, "count": 2, "key": "a"}]})");
  REQUIRE(s.gates[0].name == "throttle#1");
  REQUIRE(s.gates[2].name == "throttle#2");
  const auto r = rc::sim::run_scenario(s);
  // The second request waits 500 ms in the route throttle, then the step throttle refuses it once
  // (retry after 500 ms: retry waits that long), then admits it.
  const auto& q = r.requests[1];
  std::vector<std::pair<std::uint16_t, gate_outcome>> seen;
  for (const auto& p : q.passes)
    if (p.gate != rc::sim::service_gate) seen.emplace_back(p.gate, p.outcome);
  CHECK(seen == std::vector<std::pair<std::uint16_t, gate_outcome>>{{0, gate_outcome::delayed},
                                                                    {1, gate_outcome::retried},
                                                                    {2, gate_outcome::rejected},
                                                                    {2, gate_outcome::passed}});
  CHECK(ms(q.passes[0].wait) == 500);
  CHECK(q.outcome == request_outcome::served);
  CHECK(ms(q.ended) == 1000);
}

TEST_CASE("two throttles and two retries in one scope are told apart by their gateId") {
  // Listed first is outermost: retry#1 ( throttle#1 ( retry#2 ( throttle#2 ( service )))).
  const auto s = parse(R"({"gates": [
      {"gate": "retry", "max_attempts": 2, "backoff_ms": 0},
      {"gate": "throttle", "rate": 2, "burst": 1},
      {"gate": "retry", "max_attempts": 3, "backoff_ms": 100},
      {"gate": "throttle", "rate": 1, "burst": 1, "mode": "reject"}],
    "traffic": [{"at_ms": 0, "count": 2, "key": "a"}]})");
  const auto r = rc::sim::run_scenario(s);
  // The second request waits 500 ms in the outer throttle; the inner throttle refuses it once
  // (its token comes back at 1 s, 500 ms later: the inner retry waits that long), then admits it.
  // The outer retry sees one success: its one pass.
  const auto& q = r.requests[1];
  std::vector<std::pair<std::uint16_t, gate_outcome>> seen;
  for (const auto& p : q.passes)
    if (p.gate != rc::sim::service_gate) seen.emplace_back(p.gate, p.outcome);
  CHECK(seen == std::vector<std::pair<std::uint16_t, gate_outcome>>{{0, gate_outcome::passed},
                                                                    {1, gate_outcome::delayed},
                                                                    {2, gate_outcome::retried},
                                                                    {3, gate_outcome::rejected},
                                                                    {3, gate_outcome::passed}});
  CHECK(q.passes[2].hit == 2);  // the inner retry's attempts
  CHECK(ms(q.passes[1].wait) == 500);
  CHECK(q.outcome == request_outcome::served);
  CHECK(ms(q.ended) == 1000);
  // The first request passes everything at once.
  CHECK(r.requests[0].outcome == request_outcome::served);
  CHECK(ms(r.requests[0].ended) == 0);
}

TEST_CASE("a retry sees the downstream fail and succeed, and its backoff is a wait") {
  const auto s = parse(R"({"gates": [{"gate": "retry", "max_attempts": 3, "backoff_ms": 100, "factor": 2}],
    "service_ms": 10, "traffic": [{"at_ms": 0, "key": "a", "fail_first": 2}]})");
  const auto r = rc::sim::run_scenario(s);
  const auto& q = r.requests[0];
  CHECK(q.outcome == request_outcome::served);
  CHECK(ms(q.total_wait()) == 300);  // 100 + 200
  CHECK(ms(q.ended) == 330);         // three 10 ms attempts
  CHECK(q.passes[0].hit == 3);       // attempts
  CHECK(q.passes[0].outcome == gate_outcome::retried);
}

TEST_CASE("the same scenario gives byte-identical outputs, jittered retries included") {
  const auto s = parse(R"({"gates": [{"gate": "retry", "max_attempts": 5, "backoff_ms": 200, "jitter": "full"},
      {"gate": "throttle", "rate": 4, "mode": "reject"}],
    "service_ms": 20, "traffic": [{"at_ms": 0, "count": 6, "key": "a", "fail_first": 1}]})");
  const std::string first = all_outputs(s);
  CHECK(first == all_outputs(s));
  auto reseeded = s;
  reseeded.seed = 2;
  CHECK(first != all_outputs(reseeded));  // the seed is what makes it repeat, not the absence of jitter
  CHECK(all_outputs(parse(stacked)) == all_outputs(parse(stacked)));
}

TEST_CASE("past chart.max_rows the chart becomes a density view of bounded size") {
  auto s = parse(R"({"gates": [{"gate": "throttle", "rate": 50, "key": "client"}],
    "traffic": [{"at_ms": 0, "count": 3000, "spacing_ms": 5, "key": "a"}, {"at_ms": 0, "count": 2000, "spacing_ms": 10, "key": "b"}]})");
  const auto r = rc::sim::run_scenario(s);
  const auto sum = rc::sim::summarize(s, r);
  std::ostringstream svg;
  rc::sim::write_svg(svg, s, r, sum);
  CHECK(svg.str().find("density view") != std::string::npos);
  CHECK(svg.str().find("#4999") == std::string::npos);  // no row per request
  CHECK(svg.str().size() < 200'000);
}

TEST_CASE("without a per-request report the summary is the same and the report holds no request") {
  // --quiet with no output file: each request is folded into the summary as it ends, and forgotten.
  for (const char* text : {stacked, R"({"gates": [
      {"gate": "throttle", "scope": "route", "rate": 40, "burst": 5},
      {"gate": "slow_down", "window_ms": 1000, "delay_after": 30, "delay_ms": "(hits - 30) * 20", "counting": "fixed", "key": "client"},
      {"gate": "rate_limit", "limit": 35, "window_ms": 1000, "counting": "fixed", "key": "client", "headers": "draft-7"}],
    "service_ms": 5,
    "traffic": [{"at_ms": 0, "count": 300, "spacing_ms": 10, "key": "a", "client_timeout_ms": 300},
                {"at_ms": 0.5, "count": 300, "spacing_ms": 7, "key": "b", "client_timeout_ms": 300}]})"}) {
    const auto s = parse(text);
    const auto kept = rc::sim::run_scenario(s);
    const auto expected = rc::sim::summarize(s, kept);
    rc::sim::summary_builder b(s);
    std::size_t told = 0;
    const auto streamed = rc::sim::run_scenario(s, {.keep_requests = false, .on_finished = [&](const auto& q) {
                                                      ++told;
                                                      b.add(q);
                                                    }});
    CHECK(streamed.requests.empty());
    CHECK(streamed.request_count == kept.requests.size());
    CHECK(told == kept.requests.size());
    const auto sum = b.finish(streamed.request_count);
    std::ostringstream a, c;
    rc::sim::write_table(a, s, kept, expected, false);
    rc::sim::write_table(c, s, streamed, sum, false);
    CHECK(a.str() == c.str());
    CHECK(rc::sim::summary_line(sum) == rc::sim::summary_line(expected));
  }
}
