#include "rc/wrappers/slow_down.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "limit_note_fill.hpp"
#include "rc/gate_step.hpp"
#include "rc/gates/limiters.hpp"
#include "rc/gates/rate_limit_numbers.hpp"
#include "rc/gates/store_gate_step.hpp"

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

// The hit counter on the gate step: a fixed delay per hit, from the arrival.
template <class Counter>
struct slow_down_gate : slow_down_limiter<Counter> {
  using ticket = typename slow_down_limiter<Counter>::ticket;
  static constexpr gate_traits traits{.option = "slow_down",
                                      .gate = "slowDown",
                                      .passed = event_id::slow_down_passed,
                                      .delayed = event_id::slow_down_delayed,
                                      .rejected = event_id::slow_down_rejected,
                                      .waits = true,
                                      .queues = false,
                                      .overflow = true};

  std::string label;

  void note(exchange& ex, route_runtime&, std::string_view key, ticket& t, const gate_decision& d) const {
    limit_note& note = detail::add_limit_note(ex, "slowDown", label, {}, key);
    note.limit = this->delay_after;
    note.used = t.hit.hits;
    note.remaining = rate_limit_remaining(this->delay_after, t.hit.hits);
    note.reset = std::max(t.hit.reset_at - t.at, duration::zero());
    note.window = this->window;
    note.delay = t.delay;
    note.rejected = d.refused();
    if (d.refused()) note.retry_after = d.wait;
  }

  std::uint64_t hits(const ticket& t) const { return t.hit.hits; }
  void fields(nlohmann::json& j, const ticket& t, const gate_decision&, event_id which) const {
    j["hits"] = t.hit.hits;
    j["delayAfter"] = this->delay_after;
    j["delayMs"] = to_ms(t.delay);
    if (which == event_id::slow_down_rejected) j["timeLeftMs"] = to_ms(t.time_left);
  }

  static std::string refusal_text(const ticket& t, const gate_decision&, std::optional<std::string_view> key) {
    std::string msg = fmt::format("slow_down refused the exchange: its delay of {}ms would reach its deadline in {}ms",
                                  to_ms(t.delay), to_ms(t.time_left));
    if (key) msg += fmt::format(" (key \"{}\", hit {})", *key, t.hit.hits);
    return msg;
  }
  static void refusal_details(nlohmann::json& details, const ticket& t, const gate_decision& d) {
    details["hits"] = t.hit.hits;
    details["delay_ms"] = to_ms(t.delay);
    details["time_left_ms"] = to_ms(t.time_left);
    details["retry_after"] = rate_limit_reset_seconds(d.wait);
  }
  static constexpr std::array<std::string_view, 4> refusal_detail_names{"hits", "delay_ms", "time_left_ms",
                                                                        "retry_after"};
};

template <class Counter>
std::unique_ptr<step> make(slow_down_options& o, std::unique_ptr<step> inner, scope s) {
  slow_down_gate<Counter> gate;
  gate.window = o.window;
  gate.delay_after = static_cast<std::uint64_t>(o.delay_after);
  gate.rule = std::move(o.delay);
  gate.max_delay = o.max_delay;
  gate.label = o.label;
  return make_gate_step(std::move(gate), gate_common{std::move(o.key), o.max_keys, std::move(o.label)},
                        std::move(inner), s);
}

// The counts in a decision_store: the store counts the hit and answers its number; the delay
// rule, the deadline check and the notes are the in-memory gate's.
struct slow_down_store_policy {
  static constexpr gate_traits traits = slow_down_gate<fixed_window>::traits;
  using ticket = slow_down_limiter<fixed_window>::ticket;

  slow_down_limiter<fixed_window> rule;  // delay_for() and the options; its counter is unused
  bool sliding = true;
  std::string label;

  store_query query(std::string_view key, const gate_arrival&) const {
    store_query q;
    q.what = sliding ? store_query::kind::sliding_window : store_query::kind::fixed_window;
    q.key = key;
    q.window = rule.window;
    q.limit = std::max<std::uint64_t>(rule.delay_after, 1);  // retry_after: when a hit is not delayed
    return q;
  }

  gate_decision interpret(const store_answer& s, const gate_arrival& a, ticket& t) const {
    t.at = a.now;
    t.hit = hit_result{s.hits, a.now + s.reset, a.now + s.reset};
    t.delay = rule.delay_for(s.hits);
    if (t.delay == duration::zero()) return gate_decision::admit();
    if (a.deadline && a.now + t.delay >= *a.deadline) {
      t.time_left = std::max(*a.deadline - a.now, duration::zero());
      return gate_decision::refuse(std::max(s.retry_after, duration::zero()));
    }
    return gate_decision::wait_for(t.delay);
  }

  void note(exchange& ex, route_runtime& rt, std::string_view key, ticket& t, const gate_decision& d) const {
    gate().note(ex, rt, key, t, d);
  }
  void fields(nlohmann::json& j, const ticket& t, const gate_decision& d, event_id which) const {
    gate().fields(j, t, d, which);
  }
  // The in-memory gate's refusal, built when first read.
  error refusal(std::string_view key, const ticket& t, const gate_decision& d) const {
    return deferred_error(errc::rate_limited, true,
                          detail::gate_refusal_fields<slow_down_gate<fixed_window>>(
                              key.empty() ? std::nullopt : std::optional<std::string_view>(key), label, t, d));
  }

  const slow_down_gate<fixed_window>& gate() const { return *format; }
  // The in-memory gate's formatting, over the same options (built once, read-only after).
  std::shared_ptr<const slow_down_gate<fixed_window>> format;
};

std::unique_ptr<step> make_store_slow_down(slow_down_options& o, std::unique_ptr<step> inner, scope s) {
  slow_down_store_policy p;
  p.rule.window = o.window;
  p.rule.delay_after = static_cast<std::uint64_t>(o.delay_after);
  p.rule.rule = o.delay;
  p.rule.max_delay = o.max_delay;
  p.sliding = o.counting == counting::sliding;
  p.label = o.label;
  auto format = std::make_shared<slow_down_gate<fixed_window>>();
  static_cast<slow_down_limiter<fixed_window>&>(*format) = p.rule;
  format->label = o.label;
  p.format = std::move(format);
  return make_store_gate(
      std::move(p), std::move(o), std::nullopt,
      [s](slow_down_options local) { return make_slow_down(std::move(local), nullptr, s); }, std::move(inner), s);
}

}  // namespace

std::unique_ptr<step> make_slow_down(slow_down_options options, std::unique_ptr<step> inner, scope s) {
  options.validate();
  if (options.store) return make_store_slow_down(options, std::move(inner), s);
  if (options.counting == counting::fixed) return make<fixed_window>(options, std::move(inner), s);
  return make<sliding_window>(options, std::move(inner), s);
}

}  // namespace rc
