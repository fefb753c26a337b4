#include "rc/wrappers/throttle.hpp"

#include <cmath>
#include <cstdint>
#include <optional>

#include "rc/gate_step.hpp"
#include "rc/gates/limiters.hpp"

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

  std::string refusal_text(const ticket&, const gate_decision& d, std::optional<std::string_view> key) const {
    std::string msg = "throttle rejected the exchange: ";
    msg += d.reason;
    if (key) msg += fmt::format(" for key \"{}\"", *key);
    return msg;
  }
  void refusal_details(nlohmann::json&, const ticket&, const gate_decision&) const {}
};

}  // namespace

std::unique_ptr<step> make_throttle(throttle_options options, std::unique_ptr<step> inner, scope s) {
  options.validate();
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
