// cron expressions: parsing into one bit set per field, the next-fire search in local time, the
// mapping to UTC through the OS time-zone database (Howard Hinnant's date/tz, built with
// USE_OS_TZDB: no download, offline), and the cron source's sleep-and-fire loop.
#include "rc/cron.hpp"

#include <date/date.h>
#include <date/tz.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bitset>
#include <cctype>
#include <charconv>
#include <random>
#include <vector>

#include "rc/context.hpp"

namespace rc {

using namespace std::chrono_literals;

struct cron_schedule::spec {
  std::string expression;
  std::string timezone;
  const date::time_zone* zone = nullptr;  // null: UTC, no conversion
  std::bitset<60> seconds, minutes;
  std::bitset<24> hours;
  std::bitset<32> dom;     // 1..31
  std::bitset<13> months;  // 1..12
  std::bitset<7> dow;      // 0 = Sunday
  bool dom_star = false, dow_star = false;
};

namespace {

struct field_def {
  std::string_view name;
  int lo, hi;
  const std::array<std::string_view, 12>* names;  // value lo + i for names[i]
  int names_base;
};

constexpr std::array<std::string_view, 12> month_names = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                                          "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
constexpr std::array<std::string_view, 12> day_names = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

const field_def second_f{"second", 0, 59, nullptr, 0};
const field_def minute_f{"minute", 0, 59, nullptr, 0};
const field_def hour_f{"hour", 0, 23, nullptr, 0};
const field_def dom_f{"day-of-month", 1, 31, nullptr, 0};
const field_def month_f{"month", 1, 12, &month_names, 1};
const field_def dow_f{"day-of-week", 0, 7, &day_names, 0};

[[noreturn]] void bad_field(std::string_view op, const field_def& f, std::string_view token, std::string_view expr) {
  const std::string rule = fmt::format("{}-{}{}, `*`, a range a-b, a step */n or a-b/n, or a list", f.lo, f.hi,
                                       f.names == &month_names ? " or JAN-DEC"
                                       : f.names == &day_names ? " or SUN-SAT (0 and 7 = Sunday)"
                                                               : "");
  invalid_option(op, f.name, rule, fmt::format("\"{}\" in \"{}\"", token, expr));
}

// One value: a number in range or a name.
bool parse_value(const field_def& f, std::string_view s, int& out) {
  if (s.empty()) return false;
  if (std::isdigit(static_cast<unsigned char>(s[0]))) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc{} && p == s.data() + s.size() && out >= f.lo && out <= f.hi;
  }
  if (!f.names || s.size() != 3) return false;
  for (std::size_t i = 0; i < f.names->size(); ++i) {
    const std::string_view n = (*f.names)[i];
    if (n.empty()) break;
    bool eq = true;
    for (std::size_t k = 0; k < 3; ++k)
      if (std::toupper(static_cast<unsigned char>(s[k])) != n[k]) eq = false;
    if (eq) {
      out = f.names_base + static_cast<int>(i);
      return true;
    }
  }
  return false;
}

// A whole field into `bits` (indexed by value). Returns whether it starts with `*`.
template <std::size_t N>
bool parse_field(std::string_view op, const field_def& f, std::string_view text, std::string_view expr,
                 std::bitset<N>& bits) {
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    std::string_view range = item;
    int step = 1;
    if (const std::size_t slash = item.find('/'); slash != std::string_view::npos) {
      range = item.substr(0, slash);
      const std::string_view st = item.substr(slash + 1);
      auto [p, ec] = std::from_chars(st.data(), st.data() + st.size(), step);
      if (st.empty() || ec != std::errc{} || p != st.data() + st.size() || step < 1 || step > f.hi)
        bad_field(op, f, item, expr);
    }
    int a = 0, b = 0;
    if (range == "*") {
      a = f.lo;
      b = f.names == &day_names ? 6 : f.hi;  // `*` in day-of-week is 0-6 (7 repeats Sunday)
    } else if (const std::size_t dash = range.find('-'); dash != std::string_view::npos) {
      if (!parse_value(f, range.substr(0, dash), a) || !parse_value(f, range.substr(dash + 1), b) || a > b)
        bad_field(op, f, item, expr);
    } else {
      if (!parse_value(f, range, a)) bad_field(op, f, item, expr);
      // `a/n` runs from a to the field's end; a lone value is just itself.
      b = item.find('/') != std::string_view::npos ? f.hi : a;
    }
    for (int v = a; v <= b; v += step) bits.set(static_cast<std::size_t>(f.names == &day_names && v == 7 ? 0 : v));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return !text.empty() && text[0] == '*';
}

template <std::size_t N>
int next_bit(const std::bitset<N>& b, int from) {
  for (int i = from; i < static_cast<int>(N); ++i)
    if (b.test(static_cast<std::size_t>(i))) return i;
  return -1;
}

bool day_matches(const cron_schedule::spec& s, date::year_month_day ymd) {
  const bool d = s.dom.test(static_cast<unsigned>(ymd.day()));
  const bool w = s.dow.test(date::weekday(ymd).c_encoding());
  return (s.dom_star || s.dow_star) ? d && w : d || w;
}

// The first local time at or after `t` that the fields match, or nothing before `horizon`.
std::optional<date::local_seconds> next_local(const cron_schedule::spec& s, date::local_seconds t,
                                              date::local_seconds horizon) {
  while (t < horizon) {
    const date::local_days day = date::floor<date::days>(t);
    const date::year_month_day ymd(day);
    if (!s.months.test(static_cast<unsigned>(ymd.month()))) {
      t = date::local_days((ymd.year() / ymd.month() / 1) + date::months(1));
      continue;
    }
    if (!day_matches(s, ymd)) {
      t = day + date::days(1);
      continue;
    }
    const date::hh_mm_ss<std::chrono::seconds> tod(t - day);
    const int h = next_bit(s.hours, static_cast<int>(tod.hours().count()));
    if (h < 0) {
      t = day + date::days(1);
      continue;
    }
    if (h != tod.hours().count()) {
      t = day + std::chrono::hours(h);
      continue;
    }
    const int m = next_bit(s.minutes, static_cast<int>(tod.minutes().count()));
    if (m < 0) {
      t = day + std::chrono::hours(h + 1);
      continue;
    }
    if (m != tod.minutes().count()) {
      t = day + std::chrono::hours(h) + std::chrono::minutes(m);
      continue;
    }
    const int sec = next_bit(s.seconds, static_cast<int>(tod.seconds().count()));
    if (sec < 0) {
      t = day + std::chrono::hours(h) + std::chrono::minutes(m + 1);
      continue;
    }
    return day + std::chrono::hours(h) + std::chrono::minutes(m) + std::chrono::seconds(sec);
  }
  return std::nullopt;
}

}  // namespace

cron_schedule::cron_schedule(std::string_view expr, std::string_view timezone, std::string_view op) {
  auto s = std::make_shared<spec>();
  s->expression = std::string(expr);
  s->timezone = std::string(timezone);
  std::vector<std::string_view> fields;
  for (std::size_t i = 0; i < expr.size();) {
    while (i < expr.size() && std::isspace(static_cast<unsigned char>(expr[i]))) ++i;
    const std::size_t b = i;
    while (i < expr.size() && !std::isspace(static_cast<unsigned char>(expr[i]))) ++i;
    if (i > b) fields.push_back(expr.substr(b, i - b));
  }
  if (fields.size() != 5 && fields.size() != 6)
    invalid_option(op, "expression", "5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first)",
                   fmt::format("\"{}\" ({} fields)", expr, fields.size()));
  std::size_t i = 0;
  if (fields.size() == 6)
    parse_field(op, second_f, fields[i++], expr, s->seconds);
  else
    s->seconds.set(0);
  parse_field(op, minute_f, fields[i++], expr, s->minutes);
  parse_field(op, hour_f, fields[i++], expr, s->hours);
  s->dom_star = parse_field(op, dom_f, fields[i++], expr, s->dom);
  parse_field(op, month_f, fields[i++], expr, s->months);
  std::bitset<8> dow8;
  s->dow_star = parse_field(op, dow_f, fields[i++], expr, dow8);
  for (std::size_t d = 0; d < 7; ++d) s->dow[d] = dow8[d];

  // Day-of-month values no selected month has (30 2 *) would never fire when the day-of-week
  // cannot rescue them.
  if (s->dom_star || s->dow_star) {
    static constexpr int month_days[13] = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool possible = false;
    for (int m = 1; m <= 12 && !possible; ++m)
      if (s->months.test(static_cast<std::size_t>(m)))
        for (int d = 1; d <= month_days[m] && !possible; ++d) possible = s->dom.test(static_cast<std::size_t>(d));
    if (!possible)
      invalid_option(op, "day-of-month", "a day that the selected months have",
                     fmt::format("\"{}\" in \"{}\"", fields[fields.size() - 3], expr));
  }

  if (timezone != "UTC" && timezone != "Etc/UTC") {
    try {
      s->zone = timezone == "local" ? date::current_zone() : date::locate_zone(timezone);
    } catch (const std::exception& e) {
      invalid_option(op, "timezone", "an IANA time zone name (e.g. \"Europe/Berlin\"), \"UTC\" or \"local\"",
                     fmt::format("\"{}\"", timezone));
    }
  }
  spec_ = std::move(s);
}

const std::string& cron_schedule::expression() const noexcept { return spec_->expression; }
const std::string& cron_schedule::timezone() const noexcept { return spec_->timezone; }

std::optional<wall_time> cron_schedule::next_after(wall_time after) const {
  const spec& s = *spec_;
  const date::sys_seconds base = date::floor<std::chrono::seconds>(after);
  date::local_seconds from;
  if (!s.zone) {
    from = date::local_seconds(base.time_since_epoch());
  } else {
    from = s.zone->to_local(base) + 1s;
    // In the second pass of a repeated hour every local time there already fired on its first
    // occurrence: resume the search where the repetition ends.
    const date::local_info li = s.zone->get_info(from - 1s);
    if (li.result == date::local_info::ambiguous && base >= li.second.begin)
      from = std::max(from, date::local_seconds((li.first.end + li.first.offset).time_since_epoch()));
  }
  if (!s.zone) from += 1s;
  const date::local_seconds horizon =
      date::local_days(date::year_month_day(date::floor<date::days>(from)).year() / 1 / 1) + date::years(30);
  for (int guard = 0; guard < 100000; ++guard) {
    const auto l = next_local(s, from, horizon);
    if (!l) return std::nullopt;
    date::sys_seconds at;
    if (!s.zone) {
      at = date::sys_seconds(l->time_since_epoch());
    } else {
      const date::local_info li = s.zone->get_info(*l);
      if (li.result == date::local_info::nonexistent)
        at = li.first.end;  // skipped by a spring-forward: the first instant after the gap
      else
        at = date::sys_seconds(l->time_since_epoch() - li.first.offset);  // unique, or first occurrence
    }
    if (at > after) return wall_time(at);
    from = *l + 1s;
  }
  return std::nullopt;
}

std::string iso8601(wall_time t) { return date::format("%FT%TZ", date::floor<std::chrono::milliseconds>(t)); }

cron_source::cron_source(std::string_view expr, cron_options o)
    : o_(std::move(o)), schedule_(expr, o_.timezone, "cron") {
  o_.validate();
}

task<void> cron_source::run(source_context& sc) {
  scheduler& clk = sc.route().clock();
  // On a real clock the wall clock may be stepped while we sleep on the monotonic one: wake at
  // least this often to look again. Virtual time has no such steps (and a year of one-minute
  // wakes would be needless work).
  const bool recheck = !sc.route().ctx().is_virtual();
  constexpr duration recheck_every = std::chrono::minutes(1);
  std::mt19937_64 rng(o_.seed ? *o_.seed : std::random_device{}());
  const auto draw_jitter = [&]() -> duration {
    if (o_.jitter <= duration::zero()) return duration::zero();
    return duration(std::uniform_int_distribution<duration::rep>(0, o_.jitter.count() - 1)(rng));
  };

  wall_time from = clk.wall_now();
  if (o_.start_at && *o_.start_at - 1ns > from) from = *o_.start_at - 1ns;  // start_at itself may fire
  std::optional<wall_time> next = schedule_.next_after(from);
  for (std::uint64_t n = 1; o_.max_fires == 0 || n <= o_.max_fires; ++n) {
    if (!next || (o_.stop_at && *next >= *o_.stop_at)) co_return;
    const wall_time scheduled = *next;
    const wall_time wake = scheduled + draw_jitter();
    for (;;) {
      time_point due = clk.from_wall(wake);
      if (recheck) due = std::min(due, sc.now() + recheck_every);
      if (co_await sc.sleep_until(due) == wait_result::cancelled) co_return;
      if (clk.wall_now() >= wake) break;  // else the wall clock went back meanwhile: sleep again
    }
    const time_point fired_at = sc.now();
    const wall_time fired = clk.to_wall(fired_at);
    next = schedule_.next_after(scheduled);
    const bool last = (o_.max_fires != 0 && n == o_.max_fires) || !next || (o_.stop_at && *next >= *o_.stop_at);
    exchange ex = sc.make(cron_tick{n, scheduled, fired, fired_at});
    ex.set_header("routecraft.cron.expression", schedule_.expression());
    ex.set_header("routecraft.cron.timezone", schedule_.timezone());
    ex.set_header("routecraft.cron.scheduledTime", iso8601(scheduled));
    ex.set_header("routecraft.cron.firedTime", iso8601(fired));
    ex.set_header("routecraft.cron.counter", n);
    ex.set_header("routecraft.cron.nextRun", last ? nlohmann::json(nullptr) : nlohmann::json(iso8601(*next)));
    (void)co_await sc.emit(std::move(ex));
    // Fires that fell due while the run went on (or while the process was held up, or that a
    // forward step of the wall clock jumped over) are skipped: the next one is after now. Never
    // before `scheduled`, so a backward step does not fire the same instant twice.
    const wall_time now = clk.wall_now();
    if (next && *next <= now) next = schedule_.next_after(now);
  }
}

}  // namespace rc
