// cron(expr, {...}): a source that fires on a calendar schedule, in a time zone.
//
// Expressions have 5 fields (minute hour day-of-month month day-of-week) or 6 (a seconds field
// first). Each field is `*`, a value, a range `a-b`, a step `*/n`, `a-b/n` or `a/n` (a to the
// field's end), or a comma list of those. Months and days take names (JAN..DEC, SUN..SAT, any
// case); day-of-week 0 and 7 are both Sunday. When day-of-month and day-of-week are both
// restricted (neither starts with `*`) a day matches if EITHER matches (the Vixie cron rule);
// otherwise both must. `L`, `W`, `#` and `?` are not supported. A bad expression is RC5003 naming
// the field and the value.
//
// Time zones are IANA names read from the OS database (/usr/share/zoneinfo), "UTC" (default) or
// "local" (the machine's zone). Daylight saving: a time that falls in a skipped hour fires once,
// at the first instant after the gap (02:30 on a spring-forward night fires at 03:00); a time in a
// repeated hour fires once, at its first occurrence. See docs/schedules.md.
//
// The source runs on the engine clock: it converts the next fire instant from wall time to engine
// time (scheduler::from_wall) and sleeps until then, so under rc::virtual_time a year of schedule
// runs in milliseconds (context::set_wall_time picks the calendar start). Each fire's run is
// awaited; fires that fall due while it runs are skipped, not queued.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "rc/endpoint.hpp"
#include "rc/options.hpp"

namespace rc {

/// A parsed cron expression bound to a time zone. Copies share the parsed form. Thread-safe.
class cron_schedule {
 public:
  /// RC5003 naming the field (or `timezone`) on a bad expression. `op` names the caller in
  /// messages ("cron", "timer").
  explicit cron_schedule(std::string_view expr, std::string_view timezone = "UTC", std::string_view op = "cron");

  /// The first fire instant strictly after `after` (second resolution), or nothing when the
  /// expression has none in the next 30 years.
  std::optional<wall_time> next_after(wall_time after) const;

  const std::string& expression() const noexcept;
  const std::string& timezone() const noexcept;

  struct spec;

 private:
  std::shared_ptr<const spec> spec_;
};

/// "2026-03-29T01:00:00.000Z": a wall instant in ISO-8601, UTC, millisecond precision.
std::string iso8601(wall_time t);

struct cron_options {
  std::string timezone = "UTC";       // IANA name, "UTC" or "local"
  std::uint64_t max_fires = 0;        // 0 = unbounded
  duration jitter{};                  // each fire waits a further uniform random [0, jitter)
  std::optional<wall_time> start_at;  // no fire before this instant (inclusive)
  std::optional<wall_time> stop_at;   // no fire at or after this instant; the source ends there
  std::optional<std::uint64_t> seed;  // seeds the jitter's generator (tests); random when unset

  void validate() const {
    if (jitter < duration::zero()) invalid_option("cron", "jitter", "a duration >= 0", ms_text(jitter));
    if (start_at && stop_at && *stop_at <= *start_at)
      invalid_option("cron", "stop_at", "after start_at", iso8601(*stop_at));
  }
};

/// The body of a cron exchange.
struct cron_tick {
  std::uint64_t counter = 0;  // 1-based
  wall_time scheduled{};      // the schedule's instant (before jitter)
  wall_time fired{};          // the wall clock when the exchange started
  time_point fired_at{};      // engine time when the exchange started
};

class cron_source final : public source<cron_tick> {
 public:
  cron_source(std::string_view expr, cron_options o);
  std::string_view adapter() const override { return "cron"; }
  /// drain() waits for a cron with max_fires or stop_at; others fire until the route stops.
  bool finite() const noexcept override { return o_.max_fires > 0 || o_.stop_at.has_value(); }
  task<void> run(source_context& sc) override;
  const cron_schedule& schedule() const noexcept { return schedule_; }

 private:
  cron_options o_;
  cron_schedule schedule_;
};

inline cron_source cron(std::string_view expr, cron_options o = {}) { return cron_source(expr, std::move(o)); }

}  // namespace rc
