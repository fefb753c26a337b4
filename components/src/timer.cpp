// The timer source's loop: interval ticks on the engine clock, or daily exact_time ticks through
// a cron schedule on the wall clock; both with optional jitter.
#include "rc/timer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <memory>
#include <random>

#include "rc/context.hpp"
#include "rc/cron.hpp"

namespace rc {

namespace {

// "HH:MM:SS" -> {h, m, s}, or RC5003.
std::array<int, 3> parse_exact_time(const std::string& t) {
  std::array<int, 3> v{};
  const bool shape = t.size() == 8 && t[2] == ':' && t[5] == ':';
  for (int i = 0; shape && i < 3; ++i) {
    const char a = t[static_cast<std::size_t>(i * 3)], b = t[static_cast<std::size_t>(i * 3 + 1)];
    if (a < '0' || a > '9' || b < '0' || b > '9') {
      v[0] = 99;
      break;
    }
    v[static_cast<std::size_t>(i)] = (a - '0') * 10 + (b - '0');
  }
  if (!shape || v[0] > 23 || v[1] > 59 || v[2] > 59)
    invalid_option("timer", "exact_time", "\"HH:MM:SS\" (00:00:00 to 23:59:59)", fmt::format("\"{}\"", t));
  return v;
}

}  // namespace

timer_source::timer_source(timer_options o) : o_(std::move(o)) {
  o_.validate();
  if (!o_.exact_time.empty()) {
    const auto [h, m, s] = parse_exact_time(o_.exact_time);
    daily_ = std::make_shared<const cron_schedule>(fmt::format("{} {} {} * * *", s, m, h), o_.timezone, "timer");
  }
}

task<void> timer_source::run(source_context& sc) {
  scheduler& clk = sc.route().clock();
  std::mt19937_64 rng(o_.seed ? *o_.seed : std::random_device{}());
  const auto draw_jitter = [&]() -> duration {
    if (o_.jitter <= duration::zero()) return duration::zero();
    return duration(std::uniform_int_distribution<duration::rep>(0, o_.jitter.count() - 1)(rng));
  };
  const bool recheck = !sc.route().ctx().is_virtual();
  const duration period = daily_ ? duration(std::chrono::hours(24)) : o_.interval;

  time_point next = sc.now() + o_.delay;  // interval ticks: the next slot, engine time
  wall_time next_wall = clk.wall_now();   // exact_time: the last scheduled instant
  if (daily_) {
    auto w = daily_->next_after(next_wall);
    if (!w) co_return;
    next_wall = *w;
  }
  for (std::uint64_t n = 1; o_.count == 0 || n <= o_.count; ++n) {
    const time_point slot = daily_ ? clk.from_wall(next_wall) : next;
    const duration jitter = draw_jitter();
    if (!daily_) {
      if (co_await sc.sleep_until(slot + jitter) == wait_result::cancelled) co_return;
    } else {
      // As rc::cron: sleep on the engine clock, look at the wall clock on waking (and at least
      // every minute on a real clock, which may be stepped meanwhile).
      for (;;) {
        time_point due = clk.from_wall(next_wall + jitter);
        if (recheck) due = std::min(due, sc.now() + std::chrono::minutes(1));
        if (co_await sc.sleep_until(due) == wait_result::cancelled) co_return;
        if (clk.wall_now() >= next_wall + jitter) break;
      }
    }
    const time_point fired = sc.now();
    const bool last = o_.count != 0 && n == o_.count;
    std::optional<wall_time> following;
    if (!last) {
      if (daily_)
        following = daily_->next_after(next_wall);
      else
        following = clk.to_wall(o_.fixed_rate ? slot + o_.interval : fired + o_.interval);
    }
    exchange ex = sc.make(tick{n, fired});
    ex.set_header("routecraft.timer.counter", n);
    ex.set_header("routecraft.timer.periodMs", to_ms(period));
    ex.set_header("routecraft.timer.time", iso8601(daily_ ? next_wall : clk.to_wall(slot)));
    ex.set_header("routecraft.timer.firedTime", iso8601(clk.to_wall(fired)));
    ex.set_header("routecraft.timer.nextRun",
                  following ? nlohmann::json(iso8601(*following)) : nlohmann::json(nullptr));
    (void)co_await sc.emit(std::move(ex));
    if (daily_) {
      // Days whose tick fell due during the run (or a forward step of the wall clock) are skipped.
      const wall_time now = clk.wall_now();
      auto w = daily_->next_after(std::max(next_wall, now));
      if (!w) co_return;
      next_wall = *w;
    } else {
      next = o_.fixed_rate ? next + o_.interval : sc.now() + o_.interval;
    }
  }
}

}  // namespace rc
