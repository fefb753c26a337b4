// rate_limit alone and behind a slow_down, in virtual time (every time and header below is exact),
// plus one multi-threaded run on the real clock.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <rc/rc.hpp>

#include "support/traffic.hpp"

namespace rate_limit_test {

using namespace std::chrono_literals;
using rc::rate_limit_headers;
using rc::test::burst;
using rc::test::request;
using rc::test::served_seconds;
using rc::test::traffic;
using rc::test::traffic_log;
using header_list = std::vector<std::pair<std::string, std::string>>;

namespace {

struct limit_run {
  rc::context ctx{rc::virtual_time};
  rc::spy<int> out;
  traffic_log log;
  std::vector<nlohmann::json> passed, rejected;
  std::vector<rc::subscription> subs;

  limit_run() {
    subs.push_back(ctx.on("route:rateLimit:passed", [this](const rc::event& e) { passed.push_back(e.details); }));
    subs.push_back(ctx.on("route:rateLimit:rejected", [this](const rc::event& e) { rejected.push_back(e.details); }));
  }

  void run(std::vector<request> script, rc::rate_limit_options options) {
    ctx.add(rc::craft().id("api").from(traffic(std::move(script), log)).rate_limit(std::move(options)).to(out));
    ctx.start();
    ctx.drain();
  }
};

std::vector<int> passed_ids(const traffic_log& log) {
  std::vector<int> ids;
  for (const auto& r : log.all())
    if (r.passed()) ids.push_back(r.id);
  return ids;
}

// The headers the HTTP source writes for a gate's note.
header_list headers_in(const rc::limit_note& note) { return rc::rate_limit_headers_of(note); }

}  // namespace

TEST_CASE("limit 7 per 30 s: of ten at once seven pass and three fail fast with RC5013") {
  const auto counting = GENERATE(rc::counting::sliding, rc::counting::fixed);
  CAPTURE(rc::to_string(counting));
  limit_run r;
  r.run(burst(10), {.limit = 7, .window = 30s, .counting = counting});
  CHECK(passed_ids(r.log) == std::vector<int>{1, 2, 3, 4, 5, 6, 7});
  CHECK(r.out.count() == 7);
  for (int id = 8; id <= 10; ++id) {
    CAPTURE(id);
    const auto& resp = r.log[id];
    REQUIRE(resp.refused());
    CHECK(resp.answered == 0s);
    CHECK(resp.failure->retryable());
    const auto& d = resp.failure->details();
    CHECK(d["gate"] == "rateLimit");
    CHECK(d["status"] == 429);
    CHECK(d["message"] == "Too many requests, please try again later.");
    CHECK(d["limit"] == 7);
    CHECK(d["used"] == id);  // refused hits count too
    CHECK(d["remaining"] == 0);
    CHECK(d["reset"] == 30);
    CHECK(d["retry_after"] == 30);
    CHECK(d["retry_after_ms"] == 30000.0);
    CHECK(d["policy"] == "7-in-30sec");
    CHECK_FALSE(d.contains("key"));
  }
  CHECK(r.log[3].note("rateLimit")->remaining == 4);
  CHECK(r.log[3].note("rateLimit")->policy == "7-in-30sec");
  CHECK(r.rejected.size() == 3);
}

// ---- the stacked brief: slow_down then rate_limit -------------------------------------------

namespace {

rc::slow_down_options brief_slow_down(rc::counting counting) {
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

rc::rate_limit_options brief_rate_limit(rc::counting counting) {
  return {.limit = 7,
          .window = 30s,
          .headers = rate_limit_headers::draft_6,
          .message = "Too many requests",
          .key = rc::by_header("x-client"),
          .counting = counting};
}

struct row {
  double arrival, delay, answered;
  std::uint64_t slow_down_hit, limiter_hit;
  bool passed;
  std::string reset;  // RateLimit-Reset

  bool operator==(const row&) const = default;
};

std::ostream& operator<<(std::ostream& os, const row& r) {
  return os << fmt::format("{{arrival {}, hit {}, delay {}, limiter hit {}, {}, answered {}, reset {}}}", r.arrival,
                           r.slow_down_hit, r.delay, r.limiter_hit, r.passed ? "passed" : "refused", r.answered,
                           r.reset);
}

std::vector<row> table(const traffic_log& log) {
  std::vector<row> rows;
  for (const auto& resp : log.all()) {
    const auto* slow = resp.note("slowDown");
    const auto* limit = resp.note("rateLimit");
    std::string reset;
    for (const auto& [name, value] : headers_in(*limit))
      if (name == "RateLimit-Reset") reset = value;
    rows.push_back({rc::test::seconds(resp.arrived), rc::test::seconds(slow->delay), rc::test::seconds(resp.answered),
                    slow->used, limit->used, resp.passed(), reset});
  }
  return rows;
}

// Seven requests at once, an eighth at 12 s, a ninth at 31 s, all from one client.
std::vector<request> brief_traffic() { return burst(7) + burst(1, 12s) + burst(1, 31s); }

}  // namespace

TEST_CASE("the stacked brief: request 7 arrives within the limit and is refused after its 16 s wait") {
  const auto counting = GENERATE(rc::counting::sliding, rc::counting::fixed);
  CAPTURE(rc::to_string(counting));
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  traffic_log log;
  ctx.add(rc::craft()
              .id("api")
              .from(traffic(brief_traffic(), log))
              .slow_down(brief_slow_down(counting))
              .rate_limit(brief_rate_limit(counting))
              .to(out));
  ctx.start();
  ctx.drain();

  // Request 8 arrives at 12 s into a fresh slow_down window, is not delayed, and reaches the
  // limiter first: it takes the seventh place that request 7, still waiting, was counting on.
  const bool fixed = counting == rc::counting::fixed;
  const std::vector<row> expected{{0, 0, 0, 1, 1, true, "30"},
                                  {0, 0, 0, 2, 2, true, "30"},
                                  {0, 0, 0, 3, 3, true, "30"},
                                  {0, 1, 1, 4, 4, true, "29"},
                                  {0, 4, 4, 5, 5, true, "26"},
                                  {0, 9, 9, 6, 6, true, "21"},
                                  {0, 16, 16, 7, 8, false, "14"},
                                  {12, 0, 12, 1, 7, true, "18"},
                                  // 31 s: the fixed window (opened at 0 s) is over; the sliding one still holds the
                                  // hits from 4 s, 9 s, 12 s and 16 s, and drops the first of them at 34 s.
                                  fixed ? row{31, 0, 31, 1, 1, true, "30"} : row{31, 0, 31, 1, 5, true, "3"}};
  CHECK(table(log) == expected);
  CHECK(served_seconds(out, 9) == std::vector<double>{0, 0, 0, 1, 4, 9, -1, 12, 31});

  const auto& refused = log[7];
  REQUIRE(refused.refused());
  CHECK(refused.failure->details()["message"] == "Too many requests");
  CHECK(refused.failure->details()["retry_after"] == 14);
  CHECK(headers_in(*refused.note("rateLimit")) == header_list{{"RateLimit-Policy", "7;w=30"},
                                                              {"RateLimit-Limit", "7"},
                                                              {"RateLimit-Remaining", "0"},
                                                              {"RateLimit-Reset", "14"},
                                                              {"Retry-After", "14"}});
  CHECK(log[8].note("rateLimit")->remaining == 0);
}

TEST_CASE("the stacked brief at route scope gives the same outcomes") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  traffic_log log;
  ctx.add(rc::craft()
              .id("api")
              .slow_down(brief_slow_down(rc::counting::fixed))
              .rate_limit(brief_rate_limit(rc::counting::fixed))
              .from(traffic(brief_traffic(), log))
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(served_seconds(out, 9) == std::vector<double>{0, 0, 0, 1, 4, 9, -1, 12, 31});
  CHECK(log[7].answered == 16s);
  CHECK(log[7].refused());
}

TEST_CASE("a caller that hangs up during the slow_down never reaches the limiter") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  traffic_log log;
  std::vector<nlohmann::json> limited;
  auto sub = ctx.on("route:rateLimit:passed", [&](const rc::event& e) { limited.push_back(e.details); });
  rc::cancel_signal hang_up(ctx.clock());
  auto script = burst(5) + burst(1, 3s);
  script[4].abort = &hang_up;  // request 5 would wait 4 s
  ctx.add(rc::craft()
              .id("api")
              .from(traffic(script, log))
              .slow_down(brief_slow_down(rc::counting::sliding))
              .rate_limit(brief_rate_limit(rc::counting::sliding))
              .to(out));
  ctx.start();
  ctx.advance_to(rc::time_point{} + 2s);
  hang_up.fire();
  ctx.drain();

  CHECK(log[5].drop_reason == "client-gone");
  CHECK(log[5].note("rateLimit") == nullptr);
  // The slow_down counted it (request 6 is its hit 6), the limiter did not (request 6 is hit 5).
  CHECK(log[6].note("slowDown")->used == 6);
  CHECK(log[6].note("rateLimit")->used == 5);
  CHECK(limited.size() == 5);
  CHECK(served_seconds(out, 6) == std::vector<double>{0, 0, 0, 1, -1, 12});
}

// ---- headers, byte for byte -------------------------------------------------------------------

namespace {

// Limit 2 per 30 s, fixed window, client 127.0.0.1: requests at 0 s, 10 s and 12.5 s. The second
// passes with 20 s left in the window; the third is refused with 17.5 s left (18 rounded up).
struct header_run {
  limit_run r;
  explicit header_run(rate_limit_headers mode, std::string policy = {}, rc::counting counting = rc::counting::fixed) {
    std::vector<request> script{
        {.at = 0s, .client = "127.0.0.1"}, {.at = 10s, .client = "127.0.0.1"}, {.at = 12500ms, .client = "127.0.0.1"}};
    r.run(script, {.limit = 2,
                   .window = 30s,
                   .headers = mode,
                   .key = rc::by_header("x-client"),
                   .counting = counting,
                   .policy = std::move(policy)});
    REQUIRE(r.log[2].passed());
    REQUIRE(r.log[3].refused());
    // Headers are the transport's: rendered from the note, never in the engine's RC5013 details.
    CHECK_FALSE(r.log[3].failure->details().contains("headers"));
  }
  header_list passed() const { return headers_in(*r.log[2].note("rateLimit")); }
  header_list refused() const { return headers_in(*r.log[3].note("rateLimit")); }
};

}  // namespace

TEST_CASE("draft-6 headers on a passed and a refused exchange") {
  header_run h(rate_limit_headers::draft_6);
  CHECK(h.passed() == header_list{{"RateLimit-Policy", "2;w=30"},
                                  {"RateLimit-Limit", "2"},
                                  {"RateLimit-Remaining", "0"},
                                  {"RateLimit-Reset", "20"}});
  CHECK(h.refused() == header_list{{"RateLimit-Policy", "2;w=30"},
                                   {"RateLimit-Limit", "2"},
                                   {"RateLimit-Remaining", "0"},
                                   {"RateLimit-Reset", "18"},
                                   {"Retry-After", "18"}});
}

TEST_CASE("draft-7 headers on a passed and a refused exchange") {
  header_run h(rate_limit_headers::draft_7);
  CHECK(h.passed() == header_list{{"RateLimit-Policy", "2;w=30"}, {"RateLimit", "limit=2, remaining=0, reset=20"}});
  CHECK(h.refused() == header_list{{"RateLimit-Policy", "2;w=30"},
                                   {"RateLimit", "limit=2, remaining=0, reset=18"},
                                   {"Retry-After", "18"}});
}

TEST_CASE("draft-8 headers name the quota and the client's partition key") {
  header_run h(rate_limit_headers::draft_8);
  CHECK(h.passed() == header_list{{"RateLimit", "\"2-in-30sec\"; r=0; t=20"},
                                  {"RateLimit-Policy", "\"2-in-30sec\"; q=2; w=30; pk=:MTJjYTE3YjQ5YWYy:"}});
  CHECK(h.refused() == header_list{{"RateLimit", "\"2-in-30sec\"; r=0; t=18"},
                                   {"RateLimit-Policy", "\"2-in-30sec\"; q=2; w=30; pk=:MTJjYTE3YjQ5YWYy:"},
                                   {"Retry-After", "18"}});

  header_run named(rate_limit_headers::draft_8, "api");
  CHECK(named.passed().front() == std::pair<std::string, std::string>{"RateLimit", "\"api\"; r=0; t=20"});
  CHECK(named.r.log[3].failure->details()["policy"] == "api");
}

TEST_CASE("legacy headers: absolute reset and the Date they count from (virtual time starts in 1970)") {
  header_run h(rate_limit_headers::legacy);
  CHECK(h.passed() == header_list{{"X-RateLimit-Limit", "2"},
                                  {"X-RateLimit-Remaining", "0"},
                                  {"Date", "Thu, 01 Jan 1970 00:00:10 GMT"},
                                  {"X-RateLimit-Reset", "30"}});
  CHECK(h.refused() == header_list{{"X-RateLimit-Limit", "2"},
                                   {"X-RateLimit-Remaining", "0"},
                                   {"Date", "Thu, 01 Jan 1970 00:00:12 GMT"},
                                   {"X-RateLimit-Reset", "30"},
                                   {"Retry-After", "18"}});
}

TEST_CASE("draft-6 with legacy writes both families, legacy first") {
  header_run h(rate_limit_headers::draft_6 | rate_limit_headers::legacy);
  CHECK(h.passed() == header_list{{"X-RateLimit-Limit", "2"},
                                  {"X-RateLimit-Remaining", "0"},
                                  {"Date", "Thu, 01 Jan 1970 00:00:10 GMT"},
                                  {"X-RateLimit-Reset", "30"},
                                  {"RateLimit-Policy", "2;w=30"},
                                  {"RateLimit-Limit", "2"},
                                  {"RateLimit-Remaining", "0"},
                                  {"RateLimit-Reset", "20"}});
}

TEST_CASE("no header mode writes no headers but every counted exchange still carries its numbers") {
  header_run h(rate_limit_headers::none);
  CHECK(h.passed().empty());
  CHECK(h.refused().empty());
  const auto& note = *h.r.log[3].note("rateLimit");
  CHECK(note.limit == 2);
  CHECK(note.used == 3);
  CHECK(note.remaining == 0);
  CHECK(note.reset == 17500ms);
  CHECK(note.window == 30s);
  CHECK(note.policy == "2-in-30sec");
  CHECK(note.key == "127.0.0.1");
  CHECK(note.rejected);
  CHECK(note.retry_after == 17500ms);
  const auto& d = h.r.log[3].failure->details();
  CHECK(d["key"] == "127.0.0.1");
  CHECK(d["reset"] == 18);
  CHECK(d["reset_ms"] == 17500.0);
  CHECK(d["retry_after"] == 18);
  CHECK_FALSE(d.contains("headers"));
}

TEST_CASE("a sliding limiter's Retry-After says when a retry passes, after its reset") {
  header_run h(rate_limit_headers::draft_6, {}, rc::counting::sliding);
  // Reset: the hit from 0 s leaves at 30 s (17.5 s). A retry passes only once the hit from 10 s
  // has left as well, at 40 s (27.5 s).
  CHECK(h.refused() == header_list{{"RateLimit-Policy", "2;w=30"},
                                   {"RateLimit-Limit", "2"},
                                   {"RateLimit-Remaining", "0"},
                                   {"RateLimit-Reset", "18"},
                                   {"Retry-After", "28"}});
  CHECK(h.r.log[3].failure->details()["retry_after_ms"] == 27500.0);
}

// ---- keys and counting modes ------------------------------------------------------------------

TEST_CASE("one heavy client exhausts only its own limit when keyed, everyone's when not") {
  const auto script = burst(5, 0s, "heavy") + burst(1, 0s, "light");
  limit_run keyed;
  keyed.run(script, {.limit = 3, .window = 30s, .key = rc::by_header("x-client")});
  CHECK(passed_ids(keyed.log) == std::vector<int>{1, 2, 3, 6});
  CHECK(keyed.log[5].failure->details()["key"] == "heavy");

  limit_run unkeyed;
  unkeyed.run(script, {.limit = 3, .window = 30s});
  CHECK(passed_ids(unkeyed.log) == std::vector<int>{1, 2, 3});
}

namespace {

// The most of `times` inside any window (t - window, t].
std::size_t most_in_any_window(const std::vector<rc::duration>& times, rc::duration window) {
  std::size_t most = 0;
  for (const auto end : times) {
    const auto inside = std::count_if(times.begin(), times.end(), [&](auto t) { return t > end - window && t <= end; });
    most = std::max(most, static_cast<std::size_t>(inside));
  }
  return most;
}

std::vector<rc::duration> admitted_times(const traffic_log& log) {
  std::vector<rc::duration> out;
  for (const auto& r : log.all())
    if (r.passed()) out.push_back(r.arrived);
  return out;
}

// One request at 0 s (it opens the fixed window), then one every 2 s from 14 s to 58 s.
std::vector<request> steady_stream() {
  std::vector<request> script{{.at = 0s}};
  for (auto at = 14s; at <= 58s; at += 2s) script.push_back({.at = at});
  return script;
}

}  // namespace

TEST_CASE("on a steady stream across a window edge a fixed window admits nearly twice the limit") {
  limit_run r;
  r.run(steady_stream(), {.limit = 7, .window = 30s, .counting = rc::counting::fixed});
  // 0 s and 14..24 s in the window [0 s, 30 s); 30..42 s in the window [30 s, 60 s).
  std::vector<rc::duration> expected{0s};
  for (auto at = 14s; at <= 24s; at += 2s) expected.push_back(at);
  for (auto at = 30s; at <= 42s; at += 2s) expected.push_back(at);
  CHECK(admitted_times(r.log) == expected);
  CHECK(most_in_any_window(admitted_times(r.log), 30s) == 13);  // 2 * 7 - 1, in (12 s, 42 s]

  // Counting a closed span of one window, the edge lets through exactly twice the limit.
  limit_run edge;
  edge.run(burst(1) + burst(6, 29s) + burst(7, 30s), {.limit = 7, .window = 30s, .counting = rc::counting::fixed});
  CHECK(edge.out.count() == 14);  // all within [0 s, 30 s]
}

TEST_CASE("on the same stream a sliding window never admits more than the limit in any window") {
  limit_run r;
  r.run(steady_stream(), {.limit = 7, .window = 30s});
  std::vector<rc::duration> expected{0s};
  for (auto at = 14s; at <= 24s; at += 2s) expected.push_back(at);
  // Refused arrivals count too: a stream at twice the limit's rate stays refused.
  CHECK(admitted_times(r.log) == expected);
  CHECK(most_in_any_window(admitted_times(r.log), 30s) == 7);

  limit_run edge;
  edge.run(burst(1) + burst(6, 29s) + burst(7, 30s), {.limit = 7, .window = 30s});
  CHECK(most_in_any_window(admitted_times(edge.log), 30s) == 7);
  CHECK(edge.out.count() == 8);  // 0 s left the window (0 s, 30 s] just as the first at 30 s came
}

// ---- skip_failed / skip_successful ------------------------------------------------------------

namespace {

// Even requests fail downstream.
auto fail_even = [](rc::exchange& ex) {
  if (ex.body<int>() % 2 == 0) throw std::runtime_error("downstream failed");
};

}  // namespace

TEST_CASE("skip_failed gives the hit of a failed exchange back, refusals included") {
  SECTION("step scope") {
    rc::context ctx(rc::virtual_time);
    traffic_log log;
    ctx.add(rc::craft()
                .id("api")
                .from(traffic(burst(6) + burst(1, 10s), log))
                .rate_limit({.limit = 2, .window = 30s, .skip_failed = true})
                .process(fail_even));
    ctx.start();
    ctx.drain();
    // 1 ok (hit 1), 2 fails (hit 2, given back), 3 ok (hit 2), 4 refused (hit 3, given back),
    // 5 refused, 6 refused; at 10 s, 7 is still refused: only successes count.
    CHECK(passed_ids(log) == std::vector<int>{1, 3});
    CHECK(log[2].failure->code() == rc::errc::step_failed);
    for (int id : {4, 5, 6, 7}) CHECK(log[id].refused());
    CHECK(log[7].note("rateLimit")->used == 3);
  }
  SECTION("route scope: the run's final outcome decides") {
    rc::context ctx(rc::virtual_time);
    traffic_log log;
    ctx.add(rc::craft()
                .id("api")
                .rate_limit({.limit = 2, .window = 30s, .skip_failed = true})
                .from(traffic(burst(6) + burst(1, 10s), log))
                .process(fail_even));
    ctx.start();
    ctx.drain();
    CHECK(passed_ids(log) == std::vector<int>{1, 3});
    CHECK(log[7].note("rateLimit")->used == 3);
  }
}

TEST_CASE("without skip options failures count like any hit") {
  rc::context ctx(rc::virtual_time);
  traffic_log log;
  ctx.add(
      rc::craft().id("api").from(traffic(burst(6), log)).rate_limit({.limit = 2, .window = 30s}).process(fail_even));
  ctx.start();
  ctx.drain();
  CHECK(passed_ids(log) == std::vector<int>{1});
  CHECK(log[3].refused());
}

TEST_CASE("skip_successful gives successful hits back, failures and refusals stay counted") {
  const bool route_scope = GENERATE(true, false);
  CAPTURE(route_scope);
  rc::context ctx(rc::virtual_time);
  traffic_log log;
  const rc::rate_limit_options options{.limit = 2, .window = 30s, .skip_successful = true};
  if (route_scope)
    ctx.add(rc::craft().id("api").rate_limit(options).from(traffic(burst(7), log)).process(fail_even));
  else
    ctx.add(rc::craft().id("api").from(traffic(burst(7), log)).rate_limit(options).process(fail_even));
  ctx.start();
  ctx.drain();
  // 1 ok (back to 0), 2 fails (1), 3 ok (back to 1), 4 fails (2), 5, 6 and 7 refused.
  CHECK(passed_ids(log) == std::vector<int>{1, 3});
  CHECK(log[4].failure->code() == rc::errc::step_failed);
  for (int id : {5, 6, 7}) CHECK(log[id].refused());
  CHECK(log[7].note("rateLimit")->used == 5);
}

TEST_CASE("a hit given back after its window ended never reduces the next window") {
  rc::context ctx(rc::virtual_time);
  traffic_log log;
  // Each exchange fails 15 s after it passed the limiter: the first one in the next window.
  ctx.add(rc::craft()
              .id("api")
              .from(traffic(burst(1) + burst(1, 12s) + burst(1, 16s), log))
              .rate_limit({.limit = 1, .window = 10s, .counting = rc::counting::fixed, .skip_failed = true})
              .delay(15s)
              .process([](rc::exchange&) { throw std::runtime_error("late failure"); }));
  ctx.start();
  ctx.drain();
  // Request 1 fails at 15 s, after its window [0 s, 10 s) ended: the window [12 s, 22 s) that
  // request 2 opened keeps its hit, so request 3 at 16 s is refused.
  CHECK(log[1].failure->code() == rc::errc::step_failed);
  CHECK(log[2].failure->code() == rc::errc::step_failed);
  CHECK(log[3].refused());
}

// ---- scopes and retry -------------------------------------------------------------------------

TEST_CASE("route-scope rate_limit counts an exchange once however often retry runs the pipeline") {
  rc::context ctx(rc::virtual_time);
  traffic_log log;
  std::vector<nlohmann::json> passed;
  auto sub = ctx.on("route:rateLimit:passed", [&](const rc::event& e) { passed.push_back(e.details); });
  int calls = 0;
  ctx.add(rc::craft()
              .id("api")
              .rate_limit({.limit = 2, .window = 30s})
              .retry({.max_attempts = 2, .backoff = 0ms})
              .from(traffic(burst(2), log))
              .process([&](rc::exchange&) {
                if (++calls % 2 == 1) throw std::runtime_error("first attempt fails");
              }));
  ctx.start();
  ctx.drain();
  CHECK(calls == 4);
  CHECK(passed_ids(log) == std::vector<int>{1, 2});
  REQUIRE(passed.size() == 2);
  CHECK(passed[1]["scope"] == "route");
  CHECK(passed[1]["stepLabel"] == "route");
}

TEST_CASE("step-scope rate_limit under retry counts every attempt and retry waits out its retry_after") {
  rc::context ctx(rc::virtual_time);
  traffic_log log;
  int calls = 0;
  ctx.add(rc::craft()
              .id("api")
              .from(traffic(burst(2), log))
              .retry({.max_attempts = 2, .backoff = 0ms})
              .rate_limit({.limit = 2, .window = 30s})
              .process([&](rc::exchange&) {
                if (++calls == 1) throw std::runtime_error("first attempt fails");
              }));
  ctx.start();
  ctx.drain();
  // Request 1 takes hits 1 and 2. Request 2 is hit 3 and refused with a retryable RC5013 whose
  // retry_after (30 s) retry waits out: its second attempt is hit 1 of a fresh window.
  CHECK(passed_ids(log) == std::vector<int>{1, 2});
  REQUIRE(log[2].notes.size() == 2);
  CHECK(log[2].notes[0].used == 3);
  CHECK(log[2].notes[0].rejected);
  CHECK(log[2].notes[1].used == 1);
  CHECK(log[2].answered == 30s);
}

// ---- events -----------------------------------------------------------------------------------

TEST_CASE("rate_limit events carry hits, limit, remaining, reset, retry_after, key and label") {
  limit_run r;
  r.run(burst(3), {.limit = 2, .window = 30s, .key = rc::by_header("x-client"), .label = "per-client"});
  REQUIRE(r.passed.size() == 2);
  REQUIRE(r.rejected.size() == 1);
  const auto& p = r.passed[1];
  CHECK(p["hits"] == 2);
  CHECK(p["limit"] == 2);
  CHECK(p["remaining"] == 0);
  CHECK(p["resetMs"] == 30000.0);
  CHECK(p["key"] == "a");
  CHECK(p["label"] == "per-client");
  CHECK(p["scope"] == "step");
  CHECK(p["stepLabel"] == "to");
  CHECK(p["routeId"] == "api");
  const auto& j = r.rejected[0];
  CHECK(j["hits"] == 3);
  CHECK(j["retryAfterMs"] == 30000.0);
  CHECK(j["key"] == "a");
  CHECK(r.log[3].failure->details()["label"] == "per-client");
}

TEST_CASE("limit 0 refuses everything and says when the window resets") {
  limit_run r;
  r.run(burst(2), {.limit = 0, .window = 30s, .headers = rate_limit_headers::draft_7, .counting = rc::counting::fixed});
  CHECK(passed_ids(r.log).empty());
  CHECK(r.log[1].failure->details()["retry_after"] == 30);
}

TEST_CASE(
    "a rate_limit key selector that throws fails that exchange with RC5001 (retryable), and an rc::error it throws "
    "passes unchanged") {
  limit_run r;
  r.run(burst(1), {.key = [](const rc::exchange&) -> std::string { throw std::runtime_error("no client"); }});
  REQUIRE(r.log[1].failure);
  CHECK(r.log[1].failure->code() == rc::errc::step_failed);
  CHECK(r.log[1].failure->retryable());
  CHECK_THAT(r.log[1].failure->message(), Catch::Contains("rate_limit({ key })"));

  limit_run own;
  own.run(burst(1), {.key = [](const rc::exchange&) -> std::string {
            throw rc::error(rc::errc::validation, "tenant header malformed", false);
          }});
  REQUIRE(own.log[1].failure);
  CHECK(own.log[1].failure->code() == rc::errc::validation);
  CHECK(own.log[1].failure->message() == "tenant header malformed");
  CHECK(own.out.count() == 0);
}

// ---- validation -------------------------------------------------------------------------------

TEST_CASE("rate_limit rejects every invalid option at the call with RC5003 naming it") {
  const bool route_scope = GENERATE(true, false);
  CAPTURE(route_scope);
  auto check = [&](rc::rate_limit_options o, const char* option, const char* value) {
    try {
      if (route_scope)
        (void)rc::craft().id("x").rate_limit(std::move(o));
      else
        (void)rc::craft().id("x").from(rc::simple(1)).rate_limit(std::move(o));
      FAIL("no RC5003 for " << option);
    } catch (const rc::error& e) {
      CHECK(e.code() == rc::errc::misconfigured);
      CHECK_THAT(e.message(), Catch::Contains(fmt::format("rate_limit({{ {} }})", option)) && Catch::Contains(value));
    }
  };
  check({.limit = -1}, "limit", "got -1");
  check({.window = 0s}, "window", "got 0ms");
  check({.window = -5s}, "window", "got -5000ms");
  check({.headers = static_cast<rate_limit_headers>(64)}, "headers", "got 64");
  check({.headers = rate_limit_headers::draft_6 | rate_limit_headers::draft_7}, "headers", "got 3");
  check({.status = 200}, "status", "got 200");
  check({.max_keys = 0}, "max_keys", "got 0");
  check({.max_keys = 2000000}, "max_keys", "got 2000000");
  check({.counting = static_cast<rc::counting>(9)}, "counting", "got 9");
}

TEST_CASE("rate_limit accepts limit 0, any one draft with legacy, and a custom status") {
  CHECK_NOTHROW(rc::craft().id("x").rate_limit({.limit = 0}));
  CHECK_NOTHROW(rc::craft().id("x").rate_limit({.headers = rate_limit_headers::draft_8 | rate_limit_headers::legacy}));
  CHECK_NOTHROW(rc::craft().id("x").rate_limit({.status = 503}));
}

TEST_CASE("a rate_limit's memory stays bounded under 20,000 clients") {
  rc::context ctx(rc::virtual_time);
  traffic_log log;
  std::vector<request> script;
  for (int i = 0; i < 20000; ++i) script.push_back({.at = i * 10ms, .client = fmt::format("client-{}", i)});
  auto def = rc::craft()
                 .id("api")
                 .rate_limit({.limit = 1, .window = 1s, .key = rc::by_header("x-client"), .max_keys = 1000})
                 .from(traffic(script, log))
                 .build();
  const auto* gate = dynamic_cast<const rc::keyed_gate*>(def.gates.at(0).get());
  REQUIRE(gate);
  ctx.add(std::move(def));
  ctx.start();
  ctx.drain();
  CHECK(passed_ids(log).size() == 20000);
  CHECK(gate->stats().keys == 1000);
  CHECK(gate->stats().memory_bytes <= 1000 * 256);
}

TEST_CASE("on four threads a rate_limit admits exactly its limit") {
  rc::context ctx({.threads = 4});
  rc::spy<int> out;
  std::atomic<int> refused{0};
  auto sub = ctx.on("route:rateLimit:rejected", [&](const rc::event&) { ++refused; });
  std::vector<int> bodies(2000);
  for (int i = 0; i < 2000; ++i) bodies[i] = i;
  // The slow_down parks every exchange for 1 ms, so they reach the limiter from all four threads.
  ctx.add(rc::craft()
              .id("api")
              .from(rc::simple(bodies))
              .slow_down({.delay_after = 0, .delay = 1ms})
              .rate_limit({.limit = 100, .window = 1h})
              .to(out));
  ctx.start();
  ctx.drain();
  ctx.stop();
  CHECK(out.count() == 100);
  CHECK(refused == 1900);
}

TEST_CASE("a rate_limit never waits, so a route of synchronous steps stays on the fast path") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  auto& route =
      ctx.add(rc::craft().id("api").rate_limit({.limit = 2}).from(rc::simple({1, 2, 3})).rate_limit({}).to(out));
  CHECK(route.all_synchronous());
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{1, 2});
}

TEST_CASE("a refusal's message and details are built on first read, the same for every copy") {
  limit_run r;
  r.run(burst(3), {.limit = 2,
                   .window = 30s,
                   .headers = rate_limit_headers::draft_7 | rate_limit_headers::legacy,
                   .key = rc::by_header("x-client"),
                   .label = "per-client"});
  REQUIRE(r.log[3].refused());
  const rc::error& err = *r.log[3].failure;
  const rc::error copy_before = err;  // copied before anything was read
  const std::string message =
      "rate_limit refused the exchange: limit of 2 per 30000ms reached for key \"a\" (hit 3). Retry after ~30000ms.";
  CHECK(err.message() == message);
  CHECK(std::string(err.what()) == "RC5013: " + message);
  const auto& d = err.details();
  CHECK(d["key"] == "a");
  CHECK(d["label"] == "per-client");
  CHECK(d["used"] == 3);
  CHECK_FALSE(d.contains("headers"));  // the transport renders them from the note
  for (const char* field : {"status", "message", "retry_after_ms", "headers", "policy", "missing"}) {
    CAPTURE(field);
    const auto it = d.find(field);
    const nlohmann::json* one = copy_before.detail(field);
    REQUIRE((one != nullptr) == (it != d.end()));
    if (one) CHECK(*one == *it);
  }
  const rc::error copy_after = err;
  rc::error moved = rc::error(copy_before);
  for (const rc::error* e : {&copy_before, &copy_after, static_cast<const rc::error*>(&moved)}) {
    CHECK(e->code() == rc::errc::rate_limited);
    CHECK(e->retryable());
    CHECK(e->message() == message);
    CHECK(std::string(e->what()) == std::string(err.what()));
    CHECK(e->details() == d);
  }
}

TEST_CASE("the slow-down and rate-limit stack reads as users write it, with designated initializers in order") {
  // The route of the issue, verbatim in its option order: it must keep compiling.
  rc::context ctx(rc::virtual_time);
  rc::spy<int> handler;
  ctx.add(rc::craft()
              .id("api")
              .from(rc::simple(std::vector<int>{1, 2, 3}))
              .slow_down({.window = 10s,
                          .delay_after = 3,
                          .delay =
                              [](std::uint64_t hits) {
                                auto n = hits - 3;
                                return n * n * 1s;
                              },
                          .max_delay = 20s,
                          .key = rc::by_header("x-client")})
              .rate_limit({.limit = 7,
                           .window = 30s,
                           .headers = rc::rate_limit_headers::draft_6,
                           .message = "Too many requests",
                           .key = rc::by_header("x-client")})
              .to(handler));
  ctx.start();
  ctx.drain();
  CHECK(handler.count() == 3);
  ctx.stop();
}

// ---- a key flood against a full table ----------------------------------------------------------

namespace {

// 12,000 distinct clients, one request each, 1 ms apart, against max_keys 10,000 and a window of
// one minute: the last 2,000 find every table entry still counting and overflow.
std::vector<request> key_flood() {
  std::vector<request> script;
  for (int i = 0; i < 12'000; ++i) script.push_back({.at = i * 1ms, .client = fmt::format("flood-{}", i)});
  return script;
}

}  // namespace

TEST_CASE("after a 12,000-key flood of a 10,000-key table, new clients are still admitted on their first request") {
  const auto counting = GENERATE(rc::counting::sliding, rc::counting::fixed);
  const std::int64_t limit = GENERATE(1, 3);
  CAPTURE(rc::to_string(counting), limit);
  auto script = key_flood();
  // Then 1,000 clients never seen, one request each.
  for (int i = 0; i < 1'000; ++i) script.push_back({.at = 13s + i * 1ms, .client = fmt::format("new-{}", i)});
  limit_run r;
  r.run(script, {.limit = limit, .window = 1min, .key = rc::by_header("x-client"), .counting = counting});
  int flood_passed = 0;
  for (int id = 1; id <= 12'000; ++id) flood_passed += r.log[id].passed() ? 1 : 0;
  int new_passed = 0;
  for (int id = 12'001; id <= 13'000; ++id) new_passed += r.log[id].passed() ? 1 : 0;
  INFO(flood_passed << " of 12,000 flood clients and " << new_passed << " of 1,000 new clients admitted");
  CHECK(flood_passed >= 11'880);
  CHECK(new_passed >= 990);  // one shared overflow window refused all 1,000
  // The overflowed ones say so; their hit number is their own estimate.
  CHECK(r.log[10'000].note("rateLimit")->used == 1);
  REQUIRE(r.passed.size() == static_cast<std::size_t>(flood_passed + new_passed));
  CHECK(r.passed.back()["overflow"] == true);
  CHECK(r.passed.back()["hits"] == 1);
}

TEST_CASE("a flooding key over its own limit is still refused while it is counted in the overflow") {
  const auto counting = GENERATE(rc::counting::sliding, rc::counting::fixed);
  CAPTURE(rc::to_string(counting));
  auto script = key_flood();
  // flood-11000 overflowed with its first request; it now makes `limit` more: limit + 1 in all.
  for (int i = 0; i < 3; ++i) script.push_back({.at = 13s + i * 1ms, .client = "flood-11000"});
  // The table has room again only once its entries' hits have left (fixed: 60 s after each
  // key's first hit); by 62 s the key's sketch hits still count, so it stays in the sketch.
  script.push_back({.at = 62s, .client = "flood-11000"});
  limit_run r;
  r.run(script, {.limit = 3, .window = 1min, .key = rc::by_header("x-client"), .counting = counting});
  REQUIRE(r.log[11'001].passed());
  CHECK(r.log[12'001].passed());
  CHECK(r.log[12'001].note("rateLimit")->used == 2);
  CHECK(r.log[12'002].passed());
  CHECK(r.log[12'002].note("rateLimit")->used == 3);
  REQUIRE(r.log[12'003].refused());  // hit 4 of a limit of 3
  const auto& d = r.log[12'003].failure->details();
  CHECK(d["used"] == 4);
  CHECK(d["key"] == "flood-11000");
  CHECK(r.rejected.back()["overflow"] == true);
  // fixed: the sketch's window opened at 10 s (the first overflow) and ends at 70 s, so at 62 s
  // the key's 4 hits still count. sliding: 10-70 s is the current period, the same 4 hits.
  REQUIRE(r.log[12'004].refused());
  CHECK(r.log[12'004].failure->details()["used"] == 5);
  CHECK(r.log[12'004].failure->details()["retry_after_ms"] == (counting == rc::counting::fixed ? 8000.0 : 68000.0));
}

TEST_CASE("the overflow sketch keeps a flood's memory within the table's bound plus the sketch") {
  const auto counting = GENERATE(rc::counting::sliding, rc::counting::fixed);
  CAPTURE(rc::to_string(counting));
  rc::context ctx(rc::virtual_time);
  traffic_log log;
  auto script = key_flood();
  for (int i = 0; i < 20'000; ++i) script.push_back({.at = 13s, .client = fmt::format("more-{}", i)});
  auto def = rc::craft()
                 .id("api")
                 .rate_limit({.limit = 5, .window = 1min, .key = rc::by_header("x-client"), .counting = counting})
                 .from(traffic(script, log))
                 .build();
  const auto* gate = dynamic_cast<const rc::keyed_gate*>(def.gates.at(0).get());
  REQUIRE(gate);
  ctx.add(std::move(def));
  ctx.start();
  ctx.drain();
  const auto stats = gate->stats();
  // 4 rows of 16,384 uint32 counters (max_keys 10,000 rounded up to a power of two) per sketch.
  const std::size_t sketch_bytes = (counting == rc::counting::sliding ? 2 : 1) * 4 * 16'384 * 4;
  CHECK(stats.keys == 10'000);
  CHECK(stats.overflow_bytes == sketch_bytes);
  INFO("table " << stats.memory_bytes - stats.overflow_bytes << " bytes for 10,000 keys");
  CHECK(stats.memory_bytes - stats.overflow_bytes <= 10'000 * 256);
  CHECK(stats.memory_bytes <= 10'000 * 256 + sketch_bytes);
}

}  // namespace rate_limit_test
