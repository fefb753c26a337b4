// rc::timer additions: the wall-clock headers (time, firedTime, nextRun), exact_time (daily, in a
// time zone, across DST), jitter (bounded, seedable, not drifting the fixed-rate grid), and their
// RC5003 validation. The interval basics are in components_test.cpp.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <rc/rc.hpp>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"

namespace timer_test {

using namespace std::chrono_literals;
using rc::test::in_ms;
using rc::test::rc_error;

namespace {
rc::wall_time utc(int y, unsigned mo, unsigned d, int h = 0, int mi = 0, int s = 0) {
  return rc::wall_time(std::chrono::sys_days(std::chrono::year(y) / std::chrono::month(mo) / std::chrono::day(d)) +
                       std::chrono::hours(h) + std::chrono::minutes(mi) + std::chrono::seconds(s));
}
std::string header(const rc::spy<rc::tick>::record& r, const char* key) {
  const auto* v = r.headers.find(key);
  REQUIRE(v);
  return v->is_null() ? std::string("null") : v->is_string() ? v->get<std::string>() : v->dump();
}
}  // namespace

TEST_CASE("timer headers carry the scheduled time, the fired time and the next run in wall time") {
  rc::context ctx(rc::virtual_time);
  ctx.set_wall_time(utc(2026, 5, 1, 12));
  rc::spy<rc::tick> out;
  ctx.add(rc::craft().id("t").from(rc::timer({.interval = 100ms, .delay = 50ms, .count = 3})).delay(30ms).to(out));
  ctx.start();
  ctx.drain();
  const auto got = out.received();
  REQUIRE(got.size() == 3);
  CHECK(header(got[0], "routecraft.timer.time") == "2026-05-01T12:00:00.050Z");
  CHECK(header(got[0], "routecraft.timer.firedTime") == "2026-05-01T12:00:00.050Z");
  // Without fixed_rate the next tick is interval after this run ends: nextRun is the earliest.
  CHECK(header(got[0], "routecraft.timer.nextRun") == "2026-05-01T12:00:00.150Z");
  CHECK(header(got[1], "routecraft.timer.time") == "2026-05-01T12:00:00.180Z");
  CHECK(header(got[2], "routecraft.timer.nextRun") == "null");
  CHECK(header(got[2], "routecraft.timer.counter") == "3");
  CHECK(header(got[2], "routecraft.timer.periodMs") == "100.0");
}

TEST_CASE("timer with fixed_rate announces the next grid slot as nextRun") {
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::tick> out;
  ctx.add(rc::craft().id("t").from(rc::timer({.interval = 1s, .count = 2, .fixed_rate = true})).delay(300ms).to(out));
  ctx.start();
  ctx.drain();
  const auto got = out.received();
  REQUIRE(got.size() == 2);
  CHECK(header(got[0], "routecraft.timer.time") == "1970-01-01T00:00:00.000Z");
  CHECK(header(got[0], "routecraft.timer.nextRun") == "1970-01-01T00:00:01.000Z");
  CHECK(header(got[1], "routecraft.timer.time") == "1970-01-01T00:00:01.000Z");
}

TEST_CASE("timer exact_time ticks daily at that wall time, UTC by default") {
  rc::context ctx(rc::virtual_time);
  ctx.set_wall_time(utc(2026, 6, 1, 10));
  rc::spy<rc::tick> out;
  ctx.add(rc::craft().id("t").from(rc::timer({.count = 3, .exact_time = "09:30:00"})).to(out));
  ctx.start();
  ctx.drain();
  const auto got = out.received();
  REQUIRE(got.size() == 3);
  // 10:00 is past 09:30: the first tick is tomorrow.
  CHECK(header(got[0], "routecraft.timer.time") == "2026-06-02T09:30:00.000Z");
  CHECK(header(got[0], "routecraft.timer.nextRun") == "2026-06-03T09:30:00.000Z");
  CHECK(header(got[2], "routecraft.timer.time") == "2026-06-04T09:30:00.000Z");
  CHECK(header(got[0], "routecraft.timer.periodMs") == "86400000.0");
  CHECK(in_ms(out.times()) == std::vector<double>{(23h + 30min) / 1.0ms, (47h + 30min) / 1.0ms, (71h + 30min) / 1.0ms});
}

TEST_CASE("timer exact_time in Europe/Berlin keeps local time across spring forward") {
  rc::context ctx(rc::virtual_time);
  ctx.set_wall_time(utc(2026, 3, 28));
  rc::spy<rc::tick> out;
  ctx.add(
      rc::craft().id("t").from(rc::timer({.count = 3, .exact_time = "09:30:00", .timezone = "Europe/Berlin"})).to(out));
  ctx.start();
  ctx.drain();
  std::vector<std::string> at;
  for (const auto& r : out.received()) at.push_back(header(r, "routecraft.timer.time"));
  CHECK(at ==
        std::vector<std::string>{"2026-03-28T08:30:00.000Z", "2026-03-29T07:30:00.000Z", "2026-03-30T07:30:00.000Z"});
}

TEST_CASE("timer exact_time in a skipped hour fires once that night, at the gap's end") {
  rc::context ctx(rc::virtual_time);
  ctx.set_wall_time(utc(2026, 3, 7, 12));
  rc::spy<rc::tick> out;
  ctx.add(rc::craft()
              .id("t")
              .from(rc::timer({.count = 2, .exact_time = "02:30:00", .timezone = "America/New_York"}))
              .to(out));
  ctx.start();
  ctx.drain();
  std::vector<std::string> at;
  for (const auto& r : out.received()) at.push_back(header(r, "routecraft.timer.time"));
  CHECK(at == std::vector<std::string>{"2026-03-08T07:00:00.000Z", "2026-03-09T06:30:00.000Z"});
}

namespace {
std::vector<double> fired_ms(std::uint64_t seed, bool fixed_rate) {
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::tick> out;
  ctx.add(rc::craft()
              .id("t")
              .from(rc::timer({.interval = 1s, .count = 40, .fixed_rate = fixed_rate, .jitter = 200ms, .seed = seed}))
              .to(out));
  ctx.start();
  ctx.drain();
  return in_ms(out.times());
}
}  // namespace

TEST_CASE("timer jitter adds 0 up to (not including) jitter to each tick, fixed_rate keeps the grid, seedable") {
  const auto a = fired_ms(1, true);
  REQUIRE(a.size() == 40);
  std::vector<double> offsets;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const double off = a[k] - 1000.0 * static_cast<double>(k);  // grid slot k at k seconds
    CHECK(off >= 0);
    CHECK(off < 200);
    offsets.push_back(off);
  }
  CHECK(*std::max_element(offsets.begin(), offsets.end()) > 100);
  CHECK(fired_ms(1, true) == a);
  CHECK(fired_ms(2, true) != a);
  // Without fixed_rate each gap is interval plus that tick's jitter.
  const auto b = fired_ms(1, false);
  for (std::size_t k = 1; k < b.size(); ++k) {
    CHECK(b[k] - b[k - 1] >= 1000);
    CHECK(b[k] - b[k - 1] < 1200);
  }
}

TEST_CASE("timer rejects a bad exact_time, time zone or jitter with RC5003") {
  for (const char* t : {"25:00:00", "9:30:00", "09:30", "09:60:00", "09:30:61", "aa:bb:cc", "09-30-00"}) {
    INFO(t);
    CHECK_THROWS_MATCHES(rc::timer({.exact_time = t}), rc::error,
                         rc_error(rc::errc::misconfigured, "timer({ exact_time })"));
  }
  CHECK_THROWS_MATCHES(rc::timer({.exact_time = "09:30:00", .timezone = "Nowhere/Town"}), rc::error,
                       rc_error(rc::errc::misconfigured, "timer({ timezone })"));
  CHECK_THROWS_MATCHES(rc::timer({.jitter = -1ms}), rc::error, rc_error(rc::errc::misconfigured, "timer({ jitter })"));
  CHECK_NOTHROW(rc::timer({.exact_time = "23:59:59"}));
  CHECK_NOTHROW(rc::timer({.exact_time = "00:00:00"}));
}

}  // namespace timer_test
