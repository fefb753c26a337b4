#include "rc/wrappers/throttle.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>

#include "rc/gate_step.hpp"
#include "rc/gates/limiters.hpp"
#include "rc/gates/store_gate_step.hpp"

namespace rc {

void throttle_options::validate() const {
  // Reference order: mode, rate, per, burst, max_keys. An enum holds a bad value only through a
  // cast (a config loader's int), which must not silently become a one-second window.
  if (mode != throttle_mode::delay && mode != throttle_mode::reject)
    invalid_option("throttle", "mode", "throttle_mode::delay or throttle_mode::reject", static_cast<int>(mode));
  if (!std::isfinite(rate) || rate <= 0) invalid_option("throttle", "rate", "a finite number > 0", rate);
  if (per != rc::per::second && per != rc::per::minute && per != rc::per::hour && per != rc::per::day)
    invalid_option("throttle", "per", "per::second, per::minute, per::hour or per::day", static_cast<int>(per));
  if (burst && (!std::isfinite(*burst) || *burst <= 0))
    invalid_option("throttle", "burst", "a finite number > 0", *burst);
  if (max_keys < 1 || max_keys > max_keys_limit)
    invalid_option("throttle", "max_keys", "an integer in [1, 1000000]", max_keys);
  if (max_wait && *max_wait < duration::zero())
    invalid_option("throttle", "max_wait", "a duration >= 0", ms_text(*max_wait));
  if (max_queue && mode == throttle_mode::reject)
    invalid_option("throttle", "max_queue", "left unset in reject mode", *max_queue);
  if (max_wait && mode == throttle_mode::reject)
    invalid_option("throttle", "max_wait", "left unset in reject mode", ms_text(*max_wait));
}

namespace {

// The token bucket on the gate step: a FIFO queue per key in delay mode.
struct throttle_gate : throttle_limiter {
  static constexpr gate_traits traits{.option = "throttle",
                                      .gate = "throttle",
                                      .passed = event_id::throttle_passed,
                                      .delayed = event_id::throttle_delayed,
                                      .rejected = event_id::throttle_rejected,
                                      .waits = true,
                                      .queues = true,
                                      .overflow = true,  // delay mode only (overflows())
                                      .overflowed = event_id::throttle_overflow};

  void fields(nlohmann::json& j, const ticket&, const gate_decision& d, event_id which) const {
    if (which == event_id::throttle_delayed) j["waitMs"] = to_ms(d.wait);
  }

  static std::string refusal_text(const ticket&, const gate_decision& d, std::optional<std::string_view> key) {
    std::string msg = "throttle rejected the exchange: ";
    msg += d.reason;
    if (key) msg += fmt::format(" for key \"{}\"", *key);
    return msg;
  }
  static void refusal_details(nlohmann::json&, const ticket&, const gate_decision&) {}
  static constexpr std::array<std::string_view, 0> refusal_detail_names{};
};

// The bucket in a decision_store: GCRA there (one emission interval per token, a tolerance of
// burst - 1 intervals), the same admissions as the token bucket. Delay mode reserves a place and
// waits for it here; max_wait (and the exchange's deadline) is checked by the store before it
// reserves, so a refusal takes nothing.
struct throttle_store_policy {
  static constexpr gate_traits traits = throttle_gate::traits;
  struct ticket {};

  throttle_mode mode = throttle_mode::delay;
  duration interval{};
  duration tolerance{};
  std::optional<duration> max_wait;
  std::string label;

  store_query query(std::string_view key, const gate_arrival& a) const {
    store_query q;
    q.what = store_query::kind::throttle;
    q.key = key;
    q.interval = interval;
    q.tolerance = tolerance;
    q.reserve = mode == throttle_mode::delay;
    q.max_wait = max_wait;
    if (q.reserve && a.deadline) {
      const duration left = std::max(*a.deadline - a.now, duration::zero());
      q.max_wait = q.max_wait ? std::min(*q.max_wait, left) : left;
    }
    return q;
  }

  gate_decision interpret(const store_answer& s, const gate_arrival&, ticket&) const {
    if (!s.admitted)
      return gate_decision::refuse(
          s.wait, mode == throttle_mode::reject ? "rate limit exceeded" : "wait would exceed max_wait");
    return s.wait > duration::zero() ? gate_decision::wait_for(s.wait) : gate_decision::admit();
  }

  void note(exchange&, route_runtime&, std::string_view, ticket&, const gate_decision&) const {}

  void fields(nlohmann::json& j, const ticket&, const gate_decision& d, event_id which) const {
    if (which == event_id::throttle_delayed) j["waitMs"] = to_ms(d.wait);
  }

  // The in-memory gate's refusal, built when first read (interpret() always gives a reason).
  error refusal(std::string_view key, const ticket&, const gate_decision& d) const {
    return deferred_error(errc::rate_limited, true,
                          detail::gate_refusal_fields<throttle_gate>(
                              key.empty() ? std::nullopt : std::optional<std::string_view>(key), label, {}, d));
  }
};

std::unique_ptr<step> make_store_throttle(throttle_options options, const bucket_params& params,
                                          std::unique_ptr<step> inner, scope s) {
  throttle_store_policy policy;
  policy.mode = options.mode;
  policy.interval = duration(static_cast<duration::rep>(std::ceil(params.interval_ns)));
  policy.tolerance = duration(static_cast<duration::rep>(std::floor((params.capacity - 1) * params.interval_ns)));
  policy.max_wait = options.max_wait;
  policy.label = options.label;
  const auto max_queue = options.max_queue;
  return make_store_gate(
      std::move(policy), std::move(options), max_queue,
      [s](throttle_options local) {
        local.max_queue.reset();  // the store gate bounds the queue; the fallback only meters
        return make_throttle(std::move(local), nullptr, s);
      },
      std::move(inner), s);
}

}  // namespace

std::unique_ptr<step> make_throttle(throttle_options options, std::unique_ptr<step> inner, scope s) {
  options.validate();
  if (options.store) {
    const bucket_params params = bucket_params::from(options.rate, to_duration(options.per), options.burst);
    return make_store_throttle(std::move(options), params, std::move(inner), s);
  }
  throttle_gate gate;
  gate.mode = options.mode;
  gate.max_wait = options.max_wait;
  gate.max_queue = options.max_queue;
  gate.params = bucket_params::from(options.rate, to_duration(options.per), options.burst);
  return make_gate_step(std::move(gate),
                        gate_common{std::move(options.key), options.max_keys, std::move(options.label)},
                        std::move(inner), s);
}

}  // namespace rc
