#include "rc/wrappers/slow_down.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "keyed_windows.hpp"
#include "rc/gates/rate_limit_headers.hpp"
#include "rc/route.hpp"

namespace rc {

void slow_down_options::validate() const {
  if (window <= duration::zero()) invalid_option("slow_down", "window", "a duration > 0", ms_text(window));
  if (delay_after < 0) invalid_option("slow_down", "delay_after", "an integer >= 0", delay_after);
  if (const auto& constant = delay.constant()) {
    if (!(constant->count() >= 0))
      invalid_option("slow_down", "delay", "a duration >= 0", fmt::format("{}ms", constant->count() / 1e6));
  } else if (!delay.is_default()) {
    // A rule is a function: check the hits it will see first, where a sign error shows.
    const auto after = static_cast<std::uint64_t>(delay_after);
    for (std::uint64_t hit = after + 1; hit <= after + checked_hits; ++hit) {
      hit_delay::value d{};
      try {
        d = delay(hit, after);
      } catch (...) {
        throw error(errc::misconfigured,
                    fmt::format("slow_down({{ delay }}) threw at hit {}; it must return a duration >= 0 for "
                                "every hit ({})",
                                hit, message_of(std::current_exception())),
                    false, std::current_exception());
      }
      if (!(d.count() >= 0))
        throw error(errc::misconfigured,
                    fmt::format("slow_down({{ delay }}) must be a duration >= 0 for every delayed hit, got {}ms at "
                                "hit {}.",
                                d.count() / 1e6, hit));
    }
  }
  if (max_delay < duration::zero() || max_delay > max_timer_wait)
    invalid_option("slow_down", "max_delay", "a duration in [0, 2147483647ms] (the timer ceiling)", ms_text(max_delay));
  if (max_keys < 1 || max_keys > max_keys_limit)
    invalid_option("slow_down", "max_keys", "an integer in [1, 1000000]", max_keys);
  if (counting != rc::counting::sliding && counting != rc::counting::fixed)
    invalid_option("slow_down", "counting", "sliding or fixed", static_cast<int>(counting));
}

namespace {

template <class Counter>
class slow_down_step final : public wrapper, public keyed_gate {
 public:
  slow_down_step(slow_down_options o, std::unique_ptr<step> inner, rc::scope s)
      : wrapper(std::move(inner), s),
        options_(std::move(o)),
        delay_after_(static_cast<std::uint64_t>(options_.delay_after)),
        windows_(static_cast<bool>(options_.key), options_.max_keys) {}

  keyed_gate_stats stats() const override {
    std::lock_guard lock(mutex_);
    return windows_.stats();
  }

  task<outcome> run(exchange& ex, route_runtime& rt) override {
    std::string key;
    if (options_.key) {
      try {
        key = options_.key(ex);
      } catch (...) {
        co_return outcome::failed(std::make_exception_ptr(
            error(errc::misconfigured,
                  "slow_down({ key }) selector threw; it must return a string for every exchange (" +
                      message_of(std::current_exception()) + ")",
                  false, std::current_exception())));
      }
    }

    // Count at arrival; the hit number decides the delay, which never changes afterwards. The
    // time is read under the lock so that a counter never sees time go backwards.
    time_point arrival{};
    hit_result hit{};
    bool overflow = false;
    time_point quiet_at{};  // when a new hit of this key would not be delayed
    {
      std::lock_guard lock(mutex_);
      arrival = rt.now();
      const auto counted = windows_.increment(key, arrival, options_.window);
      hit = counted.hit;
      overflow = counted.overflow;
      if (ex.deadline()) quiet_at = counted.counter->retry_at(arrival, std::max<std::uint64_t>(delay_after_, 1));
    }

    duration delay{};
    try {
      delay = delay_for(hit.hits);
    } catch (...) {
      co_return outcome::failed(std::make_exception_ptr(
          error(errc::misconfigured,
                fmt::format("slow_down({{ delay }}) threw at hit {}; it must return a duration >= 0 for every hit ({})",
                            hit.hits, message_of(std::current_exception())),
                false, std::current_exception())));
    }
    limit_note& note = add_note(ex, key, hit, arrival, delay);

    if (delay == duration::zero()) {
      emit_passed(ex, rt, key, overflow, hit.hits, delay, false, duration::zero());
      co_return co_await run_inner(ex, rt);
    }

    if (ex.deadline() && arrival + delay >= *ex.deadline()) {
      // The caller would be gone before the answer: refuse now instead of holding it.
      const duration retry_after = quiet_at == time_point::max() ? options_.window : quiet_at - arrival;
      note.rejected = true;
      note.retry_after = retry_after;
      const duration time_left = std::max(*ex.deadline() - arrival, duration::zero());
      rt.events().emit(event_id::slow_down_rejected, [&] {
        auto j = fields(ex, rt, key, overflow, hit.hits, delay);
        j["retryAfterMs"] = to_ms(retry_after);
        j["timeLeftMs"] = to_ms(time_left);
        return j;
      });
      co_return outcome::failed(std::make_exception_ptr(refusal(key, hit.hits, delay, time_left, retry_after)));
    }

    rt.events().emit(event_id::slow_down_delayed, [&] { return fields(ex, rt, key, overflow, hit.hits, delay); });
    const wait_result r = co_await rt.clock().wait_until(arrival + delay, &rt.intake(), ex.abort_signal());
    const bool client_gone = r == wait_result::cancelled && ex.abort_signal() != nullptr &&
                             ex.abort_signal()->fired() && !rt.intake().fired();
    if (client_gone) co_return outcome::dropped("client-gone");  // the hit stays counted
    emit_passed(ex, rt, key, overflow, hit.hits, delay, true, rt.now() - arrival);
    co_return co_await run_inner(ex, rt);
  }

 private:
  duration delay_for(std::uint64_t hit) const {
    if (hit <= delay_after_) return duration::zero();
    const double ns = options_.delay(hit, delay_after_).count();
    if (!(ns > 0)) return duration::zero();  // negative (or NaN) means no delay, as in express
    if (ns >= static_cast<double>(options_.max_delay.count())) return options_.max_delay;
    return duration(std::llround(ns));
  }

  limit_note& add_note(exchange& ex, const std::string& key, const hit_result& hit, time_point now, duration delay) {
    limit_note note;
    note.gate = "slowDown";
    note.label = options_.label;
    note.limit = delay_after_;
    note.used = hit.hits;
    note.remaining = rate_limit_remaining(delay_after_, hit.hits);
    note.reset = std::max(hit.reset_at - now, duration::zero());
    note.window = options_.window;
    note.key = key;
    note.delay = delay;
    return ex.limit_notes().emplace_back(std::move(note));
  }

  nlohmann::json fields(const exchange& ex, const route_runtime& rt, const std::string& key, bool overflow,
                        std::uint64_t hits, duration delay) const {
    auto j = identity(ex, rt, options_.label);
    if (options_.key) j["key"] = key;
    if (overflow) j["overflow"] = true;  // counted in the shared window: the key table was full
    j["hits"] = hits;
    j["delayAfter"] = delay_after_;
    j["delayMs"] = to_ms(delay);
    return j;
  }

  void emit_passed(const exchange& ex, route_runtime& rt, const std::string& key, bool overflow, std::uint64_t hits,
                   duration delay, bool waited, duration elapsed) const {
    rt.events().emit(event_id::slow_down_passed, [&] {
      auto j = fields(ex, rt, key, overflow, hits, delay);
      j["waited"] = waited;
      j["elapsed"] = to_ms(elapsed);
      return j;
    });
  }

  error refusal(const std::string& key, std::uint64_t hits, duration delay, duration time_left,
                duration retry_after) const {
    std::string msg = fmt::format("slow_down refused the exchange: its delay of {}ms would reach its deadline in {}ms",
                                  to_ms(delay), to_ms(time_left));
    if (options_.key) msg += fmt::format(" (key \"{}\", hit {})", key, hits);
    msg += fmt::format(". Retry after ~{}ms.", static_cast<long long>(std::ceil(to_ms(retry_after))));
    nlohmann::json details = {{"gate", "slowDown"},
                              {"hits", hits},
                              {"delay_ms", to_ms(delay)},
                              {"time_left_ms", to_ms(time_left)},
                              {"retry_after_ms", to_ms(retry_after)},
                              {"retry_after", rate_limit_reset_seconds(retry_after)}};
    if (options_.key) details["key"] = key;
    if (!options_.label.empty()) details["label"] = options_.label;
    return error(errc::rate_limited, std::move(msg), true, nullptr, std::move(details));
  }

  slow_down_options options_;
  std::uint64_t delay_after_;
  mutable std::mutex mutex_;  // the counters: routes may run on several threads
  detail::keyed_windows<Counter> windows_;
};

}  // namespace

std::unique_ptr<step> make_slow_down(slow_down_options options, std::unique_ptr<step> inner, scope s) {
  options.validate();
  if (options.counting == counting::fixed)
    return std::make_unique<slow_down_step<fixed_window>>(std::move(options), std::move(inner), s);
  return std::make_unique<slow_down_step<sliding_window>>(std::move(options), std::move(inner), s);
}

}  // namespace rc
