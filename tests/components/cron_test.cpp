// rc::cron: the expression grammar against known next-fire times (UTC and both DST changes in
// Europe/Berlin and America/New_York, 2026), the source on the virtual clock through real routes
// (a year of schedule, max_fires, start_at/stop_at, jitter), and RC5003 for bad expressions.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <rc/rc.hpp>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"

namespace cron_test {

using namespace std::chrono_literals;
using rc::test::rc_error;

namespace {

// A UTC instant from calendar fields.
rc::wall_time utc(int y, unsigned mo, unsigned d, int h = 0, int mi = 0, int s = 0) {
  return rc::wall_time(std::chrono::sys_days(std::chrono::year(y) / std::chrono::month(mo) / std::chrono::day(d)) +
                       std::chrono::hours(h) + std::chrono::minutes(mi) + std::chrono::seconds(s));
}

std::string iso(rc::wall_time t) { return rc::iso8601(t); }

std::vector<std::string> next_n(const rc::cron_schedule& s, rc::wall_time from, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    auto t = s.next_after(from);
    if (!t) break;
    out.push_back(iso(*t));
    from = *t;
  }
  return out;
}

struct row {
  const char* expr;
  rc::wall_time from;
  const char* expected;  // ISO of the first fire strictly after `from`
};

}  // namespace

TEST_CASE("cron expressions give the known next fire time (UTC)") {
  // 2026-01-01 is a Thursday.
  const std::vector<row> rows = {
      {"* * * * *", utc(2026, 1, 1), "2026-01-01T00:01:00.000Z"},
      {"* * * * *", utc(2026, 1, 1, 0, 0, 59), "2026-01-01T00:01:00.000Z"},
      {"*/15 * * * *", utc(2026, 1, 1, 0, 7, 30), "2026-01-01T00:15:00.000Z"},
      {"*/15 * * * *", utc(2026, 1, 1, 0, 45), "2026-01-01T01:00:00.000Z"},
      {"10-40/5 * * * *", utc(2026, 1, 1, 0, 41), "2026-01-01T01:10:00.000Z"},
      {"10-40/5 * * * *", utc(2026, 1, 1, 0, 12), "2026-01-01T00:15:00.000Z"},
      {"5/15 * * * *", utc(2026, 1, 1, 0, 21), "2026-01-01T00:35:00.000Z"},
      {"0,30 8-10 * * *", utc(2026, 1, 1, 10, 30), "2026-01-02T08:00:00.000Z"},
      {"0 9 * * MON-FRI", utc(2026, 1, 3, 10), "2026-01-05T09:00:00.000Z"},
      {"0 22 * * 1-5", utc(2026, 1, 2, 22), "2026-01-05T22:00:00.000Z"},
      {"0 0 * * sun", utc(2026, 1, 1), "2026-01-04T00:00:00.000Z"},
      {"0 0 * * 7", utc(2026, 1, 1), "2026-01-04T00:00:00.000Z"},
      {"0 0 * * 0", utc(2026, 1, 1), "2026-01-04T00:00:00.000Z"},
      {"0 0 * * Sat,Sun", utc(2026, 1, 1), "2026-01-03T00:00:00.000Z"},
      {"0 0 1,15 * *", utc(2026, 1, 2), "2026-01-15T00:00:00.000Z"},
      {"0 12 * JAN,jul *", utc(2026, 2, 1), "2026-07-01T12:00:00.000Z"},
      {"0 0 1 */3 *", utc(2026, 2, 15), "2026-04-01T00:00:00.000Z"},
      {"0 0 1 MAR-may *", utc(2026, 5, 2), "2027-03-01T00:00:00.000Z"},
      // Both days restricted: either matches (Sunday 4 Jan comes before the 1st of February).
      {"30 4 1 * 0", utc(2026, 1, 1, 5), "2026-01-04T04:30:00.000Z"},
      {"30 4 1,2 * 0", utc(2026, 1, 1, 5), "2026-01-02T04:30:00.000Z"},
      // Day-of-month starting with `*`: both must match (odd days that are Mondays).
      {"0 0 */2 * MON", utc(2026, 1, 1), "2026-01-05T00:00:00.000Z"},
      {"0 0 */2 * MON", utc(2026, 1, 5), "2026-01-19T00:00:00.000Z"},
      // February 29: only in leap years.
      {"0 0 29 2 *", utc(2026, 1, 1), "2028-02-29T00:00:00.000Z"},
      {"0 0 29 2 *", utc(2028, 2, 29), "2032-02-29T00:00:00.000Z"},
      // Restricted to February, day 29 or any Monday.
      {"0 0 29 2 1", utc(2026, 2, 24), "2027-02-01T00:00:00.000Z"},
      // End of month: months without the day are skipped.
      {"0 0 31 * *", utc(2026, 4, 1), "2026-05-31T00:00:00.000Z"},
      {"0 0 30 * *", utc(2026, 2, 1), "2026-03-30T00:00:00.000Z"},
      {"59 23 31 12 *", utc(2026, 6, 1), "2026-12-31T23:59:00.000Z"},
      {"0 0 1 1 *", utc(2026, 12, 31, 23, 59, 59), "2027-01-01T00:00:00.000Z"},
      // Six fields: seconds first.
      {"*/10 * * * * *", utc(2026, 1, 1, 0, 0, 5), "2026-01-01T00:00:10.000Z"},
      {"30 0 0 1 1 *", utc(2026, 1, 1, 0, 0, 30), "2027-01-01T00:00:30.000Z"},
      {"15,45 * * * * *", utc(2026, 1, 1, 0, 0, 46), "2026-01-01T00:01:15.000Z"},
      {"0 0 12 * * MON", utc(2026, 1, 1), "2026-01-05T12:00:00.000Z"},
      // Extra whitespace between fields is fine.
      {"  0   12  *  *  * ", utc(2026, 1, 1), "2026-01-01T12:00:00.000Z"},
  };
  for (const auto& r : rows) {
    INFO(r.expr << " after " << iso(r.from));
    const rc::cron_schedule s(r.expr);
    const auto next = s.next_after(r.from);
    REQUIRE(next);
    CHECK(iso(*next) == r.expected);
  }
}

TEST_CASE("a fire time is strictly after the given instant, also with a fraction of a second") {
  const rc::cron_schedule s("0 * * * *");
  CHECK(iso(*s.next_after(utc(2026, 1, 1, 5))) == "2026-01-01T06:00:00.000Z");
  CHECK(iso(*s.next_after(utc(2026, 1, 1, 5) - 1ns)) == "2026-01-01T05:00:00.000Z");
  CHECK(iso(*s.next_after(utc(2026, 1, 1, 5) + 500ms)) == "2026-01-01T06:00:00.000Z");
}

TEST_CASE("Europe/Berlin spring forward: a time in the skipped hour fires once, at 03:00 CEST") {
  // 2026-03-29 02:00 CET becomes 03:00 CEST (01:00 UTC).
  const rc::cron_schedule daily("30 2 * * *", "Europe/Berlin");
  CHECK(next_n(daily, utc(2026, 3, 27, 12), 3) ==
        std::vector<std::string>{"2026-03-28T01:30:00.000Z", "2026-03-29T01:00:00.000Z", "2026-03-30T00:30:00.000Z"});
  // Every half hour: 02:00 and 02:30 do not exist; they collapse into one fire at the gap's end.
  const rc::cron_schedule half("*/30 * * * *", "Europe/Berlin");
  CHECK(next_n(half, utc(2026, 3, 29, 0, 15), 3) ==
        std::vector<std::string>{"2026-03-29T00:30:00.000Z", "2026-03-29T01:00:00.000Z", "2026-03-29T01:30:00.000Z"});
  // 02:00 (skipped) and 03:00 are the same instant: one fire.
  const rc::cron_schedule two_three("0 2,3 * * *", "Europe/Berlin");
  CHECK(next_n(two_three, utc(2026, 3, 28, 12), 3) ==
        std::vector<std::string>{"2026-03-29T01:00:00.000Z", "2026-03-30T00:00:00.000Z", "2026-03-30T01:00:00.000Z"});
}

TEST_CASE("Europe/Berlin fall back: a time in the repeated hour fires once, on its first occurrence") {
  // 2026-10-25 03:00 CEST becomes 02:00 CET (01:00 UTC): 02:00-02:59 happens twice.
  const rc::cron_schedule daily("30 2 * * *", "Europe/Berlin");
  CHECK(next_n(daily, utc(2026, 10, 24, 12), 2) ==
        std::vector<std::string>{"2026-10-25T00:30:00.000Z", "2026-10-26T01:30:00.000Z"});
  const rc::cron_schedule half("0,30 * * * *", "Europe/Berlin");
  CHECK(next_n(half, utc(2026, 10, 24, 23, 45), 4) ==
        std::vector<std::string>{"2026-10-25T00:00:00.000Z", "2026-10-25T00:30:00.000Z", "2026-10-25T02:00:00.000Z",
                                 "2026-10-25T02:30:00.000Z"});
  // Asked from inside the second pass (02:10 CET), it does not fire 02:30 again.
  CHECK(iso(*half.next_after(utc(2026, 10, 25, 1, 10))) == "2026-10-25T02:00:00.000Z");
  // Every hour that day: 25 hours, 24 local hours, 24 fires.
  const rc::cron_schedule hourly("0 * * * *", "Europe/Berlin");
  CHECK(next_n(hourly, utc(2026, 10, 24, 22) - 1s, 30).size() == 30);
  int on_the_day = 0;
  for (auto& t : next_n(hourly, utc(2026, 10, 24, 22) - 1s, 30))
    if (t < "2026-10-25T23:00") ++on_the_day;  // local midnight to midnight
  CHECK(on_the_day == 24);
}

TEST_CASE("America/New_York: both DST changes of 2026") {
  // Spring forward 2026-03-08 02:00 EST -> 03:00 EDT (07:00 UTC).
  const rc::cron_schedule spring("30 2 * * *", "America/New_York");
  CHECK(next_n(spring, utc(2026, 3, 7, 12), 2) ==
        std::vector<std::string>{"2026-03-08T07:00:00.000Z", "2026-03-09T06:30:00.000Z"});
  const rc::cron_schedule two_three("0 2,3 * * *", "America/New_York");
  CHECK(next_n(two_three, utc(2026, 3, 7, 12), 3) ==
        std::vector<std::string>{"2026-03-08T07:00:00.000Z", "2026-03-09T06:00:00.000Z", "2026-03-09T07:00:00.000Z"});
  // Fall back 2026-11-01 02:00 EDT -> 01:00 EST (06:00 UTC): 01:00-01:59 happens twice.
  const rc::cron_schedule fall("30 1 * * *", "America/New_York");
  CHECK(next_n(fall, utc(2026, 10, 31, 12), 2) ==
        std::vector<std::string>{"2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"});
  // A daily job at 09:00 stays at 09:00 local across both changes.
  const rc::cron_schedule nine("0 9 * * *", "America/New_York");
  CHECK(next_n(nine, utc(2026, 3, 7, 15), 2) ==
        std::vector<std::string>{"2026-03-08T13:00:00.000Z", "2026-03-09T13:00:00.000Z"});
  CHECK(next_n(nine, utc(2026, 10, 31, 14), 2) ==
        std::vector<std::string>{"2026-11-01T14:00:00.000Z", "2026-11-02T14:00:00.000Z"});
}

TEST_CASE("invalid cron expressions are RC5003 naming the field and the value") {
  struct bad {
    const char* expr;
    const char* text;
  };
  const std::vector<bad> rows = {
      {"61 * * * *", "cron({ minute }) must be 0-59"},
      {"61 * * * *", "got \"61\" in \"61 * * * *\""},
      {"* 24 * * *", "cron({ hour })"},
      {"* * 0 * *", "cron({ day-of-month })"},
      {"* * 32 * *", "cron({ day-of-month })"},
      {"* * * 13 *", "cron({ month })"},
      {"* * * FOO *", "got \"FOO\""},
      {"* * * * 8", "cron({ day-of-week })"},
      {"* * * * MONDAY", "cron({ day-of-week })"},
      {"*/0 * * * *", "got \"*/0\""},
      {"10-5 * * * *", "got \"10-5\""},
      {"1,,2 * * * *", "cron({ minute })"},
      {"a * * * *", "cron({ minute })"},
      {"-1 * * * *", "cron({ minute })"},
      {"60 * * * * *", "cron({ second })"},
      {"0 0 L * *", "cron({ day-of-month })"},
      {"* * * *", "cron({ expression }) must be 5 fields"},
      {"* * * * * * *", "(7 fields)"},
      {"", "cron({ expression })"},
      {"0 0 30 2 *", "cron({ day-of-month }) must be a day that the selected months have"},
  };
  for (const auto& r : rows) {
    INFO(r.expr);
    CHECK_THROWS_MATCHES(rc::cron_schedule(r.expr), rc::error, rc_error(rc::errc::misconfigured, r.text));
  }
  CHECK_THROWS_MATCHES(rc::cron("* * * * *", {.timezone = "Mars/Olympus"}), rc::error,
                       rc_error(rc::errc::misconfigured, "cron({ timezone })"));
  CHECK_THROWS_MATCHES(rc::cron("* * * * *", {.jitter = -1ms}), rc::error,
                       rc_error(rc::errc::misconfigured, "cron({ jitter })"));
  CHECK_THROWS_MATCHES(rc::cron("* * * * *", {.start_at = utc(2026, 2, 1), .stop_at = utc(2026, 1, 1)}), rc::error,
                       rc_error(rc::errc::misconfigured, "cron({ stop_at })"));
  // A day-of-week can rescue a day-of-month that never occurs (either may match).
  CHECK_NOTHROW(rc::cron_schedule("0 0 30 2 MON"));
}

// ---- the source, on the virtual clock -----------------------------------------------------------

TEST_CASE("a year of weekday 09:00 Berlin fires runs on the virtual clock, through a route") {
  rc::context ctx(rc::virtual_time);
  ctx.set_wall_time(utc(2026, 1, 1));
  rc::spy<rc::cron_tick> out;
  ctx.add(rc::craft()
              .id("report")
              .from(rc::cron("0 9 * * MON-FRI", {.timezone = "Europe/Berlin", .stop_at = utc(2027, 1, 1)}))
              .to(out));
  ctx.start();
  ctx.drain();  // finite: it ends at stop_at
  const auto got = out.received();
  REQUIRE(got.size() == 261);  // weekdays in 2026
  CHECK(iso(got.front().body.scheduled) == "2026-01-01T08:00:00.000Z");
  CHECK(iso(got.back().body.scheduled) == "2026-12-31T08:00:00.000Z");
  int summer = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto& r = got[i];
    CHECK(r.body.counter == i + 1);
    CHECK(r.body.fired == r.body.scheduled);               // no jitter, virtual time is never late
    CHECK(ctx.clock().to_wall(r.at) == r.body.scheduled);  // arrived at that engine time
    const std::string t = iso(r.body.scheduled);
    if (t.substr(11, 2) == "07")
      ++summer;  // 09:00 CEST
    else
      CHECK(t.substr(11, 2) == "08");  // 09:00 CET
  }
  // CEST 2026: Mon 30 March to Fri 23 October.
  CHECK(summer == 150);
  CHECK(*got[0].headers.find("routecraft.cron.expression") == "0 9 * * MON-FRI");
  CHECK(*got[0].headers.find("routecraft.cron.timezone") == "Europe/Berlin");
  CHECK(*got[0].headers.find("routecraft.cron.scheduledTime") == "2026-01-01T08:00:00.000Z");
  CHECK(*got[0].headers.find("routecraft.cron.firedTime") == "2026-01-01T08:00:00.000Z");
  CHECK(*got[0].headers.find("routecraft.cron.counter") == 1);
  CHECK(*got[0].headers.find("routecraft.cron.nextRun") == "2026-01-02T08:00:00.000Z");
  CHECK(got.back().headers.find("routecraft.cron.nextRun")->is_null());  // 2027 is past stop_at
}

TEST_CASE("the cron source across Berlin's spring-forward night fires 02:30 once, at 03:00 CEST") {
  rc::context ctx(rc::virtual_time);
  ctx.set_wall_time(utc(2026, 3, 28));
  rc::spy<rc::cron_tick> out;
  ctx.add(rc::craft().id("c").from(rc::cron("30 2 * * *", {.timezone = "Europe/Berlin", .max_fires = 3})).to(out));
  ctx.start();
  ctx.drain();
  std::vector<std::string> at;
  for (const auto& r : out.received()) at.push_back(iso(ctx.clock().to_wall(r.at)));
  CHECK(at ==
        std::vector<std::string>{"2026-03-28T01:30:00.000Z", "2026-03-29T01:00:00.000Z", "2026-03-30T00:30:00.000Z"});
}

TEST_CASE("the cron source across New York's fall-back night fires 01:30 once") {
  rc::context ctx(rc::virtual_time);
  ctx.set_wall_time(utc(2026, 10, 31));
  rc::spy<rc::cron_tick> out;
  ctx.add(rc::craft()
              .id("c")
              .from(rc::cron("*/30 1 * * *", {.timezone = "America/New_York", .stop_at = utc(2026, 11, 3)}))
              .to(out));
  ctx.start();
  ctx.drain();
  std::vector<std::string> at;
  for (const auto& r : out.received()) at.push_back(iso(r.body.scheduled));
  // 01:00 and 01:30 local on 31 Oct (EDT), 1 Nov (first pass, EDT), 2 Nov (EST).
  CHECK(at == std::vector<std::string>{"2026-10-31T05:00:00.000Z", "2026-10-31T05:30:00.000Z",
                                       "2026-11-01T05:00:00.000Z", "2026-11-01T05:30:00.000Z",
                                       "2026-11-02T06:00:00.000Z", "2026-11-02T06:30:00.000Z"});
}

TEST_CASE("cron max_fires ends the source after that many fires, the last has no nextRun") {
  rc::context ctx(rc::virtual_time);
  ctx.set_wall_time(utc(2026, 1, 1, 0, 0, 30));
  rc::spy<rc::cron_tick> out;
  ctx.add(rc::craft().id("c").from(rc::cron("* * * * *", {.max_fires = 5})).to(out));
  ctx.start();
  ctx.drain();
  const auto got = out.received();
  REQUIRE(got.size() == 5);
  CHECK(rc::test::in_ms(out.times()) == std::vector<double>{30e3, 90e3, 150e3, 210e3, 270e3});
  CHECK(*got[3].headers.find("routecraft.cron.nextRun") == "2026-01-01T00:05:00.000Z");
  CHECK(got[4].headers.find("routecraft.cron.nextRun")->is_null());
  ctx.advance(std::chrono::hours(1));
  CHECK(out.count() == 5);
}

TEST_CASE("cron start_at (inclusive) and stop_at (exclusive) bound the fires") {
  rc::context ctx(rc::virtual_time);
  ctx.set_wall_time(utc(2026, 1, 1));
  rc::spy<rc::cron_tick> out;
  ctx.add(rc::craft()
              .id("c")
              .from(rc::cron("0 * * * *", {.start_at = utc(2026, 1, 1, 5), .stop_at = utc(2026, 1, 1, 8)}))
              .to(out));
  ctx.start();
  ctx.drain();
  std::vector<std::string> at;
  for (const auto& r : out.received()) at.push_back(iso(r.body.scheduled));
  CHECK(at ==
        std::vector<std::string>{"2026-01-01T05:00:00.000Z", "2026-01-01T06:00:00.000Z", "2026-01-01T07:00:00.000Z"});
}

TEST_CASE("an endless cron fires until the route stops") {
  rc::context ctx(rc::virtual_time);
  ctx.set_wall_time(utc(2026, 1, 1));
  rc::spy<rc::cron_tick> out;
  ctx.add(rc::craft().id("c").from(rc::cron("*/10 * * * *")).to(out));
  ctx.start();
  ctx.advance(std::chrono::hours(1));
  CHECK(out.count() == 6);
  ctx.stop();
  ctx.advance(std::chrono::hours(1));
  CHECK(out.count() == 6);
}

TEST_CASE("fires that fall due while a run is still going are skipped, not queued") {
  rc::context ctx(rc::virtual_time);
  ctx.set_wall_time(utc(2026, 1, 1));
  rc::spy<rc::cron_tick> out;
  ctx.add(rc::craft().id("c").from(rc::cron("* * * * *", {.max_fires = 3})).delay(150s).to(out));
  ctx.start();
  ctx.drain();
  std::vector<std::string> at;
  for (const auto& r : out.received()) at.push_back(iso(r.body.scheduled));
  // 00:01 runs until 00:03:30; 00:02 and 00:03 are skipped.
  CHECK(at ==
        std::vector<std::string>{"2026-01-01T00:01:00.000Z", "2026-01-01T00:04:00.000Z", "2026-01-01T00:07:00.000Z"});
}

namespace {
std::vector<rc::duration> jitter_of(std::uint64_t seed) {
  rc::context ctx(rc::virtual_time);
  ctx.set_wall_time(utc(2026, 1, 1));
  rc::spy<rc::cron_tick> out;
  ctx.add(rc::craft().id("c").from(rc::cron("0 * * * *", {.max_fires = 50, .jitter = 10min, .seed = seed})).to(out));
  ctx.start();
  ctx.drain();
  std::vector<rc::duration> j;
  for (const auto& r : out.received()) {
    CHECK(ctx.clock().to_wall(r.at) == r.body.fired);
    j.push_back(r.body.fired - r.body.scheduled);
  }
  return j;
}
}  // namespace

TEST_CASE("cron jitter delays each fire by 0 up to (not including) jitter, from a seedable generator") {
  const auto a = jitter_of(42);
  REQUIRE(a.size() == 50);
  for (auto d : a) {
    CHECK(d >= rc::duration::zero());
    CHECK(d < 10min);
  }
  CHECK(*std::max_element(a.begin(), a.end()) > 5min);  // spread over the range, not stuck at 0
  CHECK(*std::min_element(a.begin(), a.end()) < 5min);
  CHECK(jitter_of(42) == a);  // same seed, same schedule
  CHECK(jitter_of(7) != a);
}

TEST_CASE("set_wall_time moves event timestamps and wall_time_ms with it") {
  rc::context ctx(rc::virtual_time);
  ctx.set_wall_time(utc(2026, 3, 29, 1));
  rc::test::event_recorder events(ctx, "route:exchange:completed");
  rc::spy<int> out;
  ctx.add(rc::craft().id("s").from(rc::simple(1)).delay(1500ms).to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(events.all().size() == 1);
  CHECK(events.all()[0].envelope["ts"] == "2026-03-29T01:00:01.500Z");
  CHECK(
      ctx.wall_time_ms() ==
      std::chrono::duration_cast<std::chrono::milliseconds>((utc(2026, 3, 29, 1) + 1500ms).time_since_epoch()).count());
}

TEST_CASE("a wall clock stepped back while cron sleeps: it sleeps again instead of firing early") {
  rc::context ctx(rc::virtual_time);
  ctx.set_wall_time(utc(2026, 1, 1));
  rc::spy<rc::cron_tick> out;
  ctx.add(rc::craft().id("c").from(rc::cron("0 * * * *", {.max_fires = 2})).to(out));
  ctx.start();
  ctx.advance(30min);
  ctx.set_wall_time(utc(2026, 1, 1));  // back 30 minutes
  ctx.drain();
  const auto got = out.received();
  REQUIRE(got.size() == 2);
  // 01:00 on the stepped clock is 90 minutes of engine time after the start.
  CHECK(rc::test::in_ms(out.times()) == std::vector<double>{90 * 60e3, 150 * 60e3});
  CHECK(iso(got[0].body.fired) == "2026-01-01T01:00:00.000Z");
}

TEST_CASE("a wall clock stepped forward past fires: the due fire happens once, the others are skipped") {
  rc::context ctx(rc::virtual_time);
  ctx.set_wall_time(utc(2026, 1, 1));
  rc::spy<rc::cron_tick> out;
  ctx.add(rc::craft().id("c").from(rc::cron("0 * * * *", {.max_fires = 2})).to(out));
  ctx.start();
  ctx.advance(30min);
  ctx.set_wall_time(utc(2026, 1, 1, 5, 30));  // forward five hours
  ctx.drain();
  const auto got = out.received();
  REQUIRE(got.size() == 2);
  CHECK(iso(got[0].body.scheduled) == "2026-01-01T01:00:00.000Z");
  CHECK(iso(got[0].body.fired) == "2026-01-01T06:00:00.000Z");      // woke at its engine time
  CHECK(iso(got[1].body.scheduled) == "2026-01-01T07:00:00.000Z");  // 02:00 to 06:00 skipped
}

}  // namespace cron_test
