#include "rc/wrappers/rate_limit.hpp"

#include <algorithm>
#include <cmath>

#include "limit_note_fill.hpp"
#include "rc/context.hpp"
#include "rc/gate_step.hpp"
#include "rc/gates/limiters.hpp"
#include "rc/gates/store_gate_step.hpp"

namespace rc {

void rate_limit_options::validate() const {
  if (limit < 0) invalid_option("rate_limit", "limit", "an integer >= 0", limit);
  if (window <= duration::zero()) invalid_option("rate_limit", "window", "a duration > 0", ms_text(window));
  if (!is_valid_header_mode(headers))
    invalid_option("rate_limit", "headers", "none, draft_6, draft_7 or draft_8, optionally | legacy",
                   static_cast<int>(headers));
  if (status < 400 || status > 599)
    invalid_option("rate_limit", "status", "an HTTP error status in [400, 599]", status);
  if (max_keys < 1 || max_keys > max_keys_limit)
    invalid_option("rate_limit", "max_keys", "an integer in [1, 1000000]", max_keys);
  if (counting != rc::counting::sliding && counting != rc::counting::fixed)
    invalid_option("rate_limit", "counting", "sliding or fixed", static_cast<int>(counting));
}

namespace {

// What every refusal of one gate shares, built once with the gate.
struct refusal_shape {
  refusal_shape(const rate_limit_options& o, std::uint64_t limit, const std::string& policy)
      : status(o.status),
        message(o.message),
        limit(limit),
        window(o.window),
        keyed(static_cast<bool>(o.key)),
        policy(policy),
        label(o.label),
        reached(fmt::format("rate_limit refused the exchange: limit of {} per {} reached", limit, ms_text(o.window))) {}

  nlohmann::json status;   // details' "status"
  nlohmann::json message;  // details' "message"
  std::uint64_t limit;
  duration window;
  bool keyed;
  std::string policy;
  std::string label;
  std::string reached;  // the message's fixed start
};

// One refusal's RC5013 fields (deferred_error), built only when read: the message and the 12-field
// details are what an eager error held, byte for byte. A transport reads status, message and
// retry_after_ms through error::detail() without building the rest; its headers come from the
// exchange's limit note.
class refusal_fields {
 public:
  refusal_fields(std::shared_ptr<const refusal_shape> shape, const limit_note& note)
      : shape_(std::move(shape)),
        key_(shape_->keyed ? note.key : std::string()),
        used_(note.used),
        remaining_(note.remaining),
        reset_(note.reset),
        retry_after_(note.retry_after),
        retry_after_ms_(to_ms(note.retry_after)) {}

  std::string message() const {
    std::string msg = shape_->reached;
    if (shape_->keyed) msg += fmt::format(" for key \"{}\"", key_);
    msg += fmt::format(" (hit {}). Retry after ~{}ms.", used_, static_cast<long long>(std::ceil(to_ms(retry_after_))));
    return msg;
  }

  nlohmann::json details() const {
    nlohmann::json details = {{"gate", "rateLimit"},
                              {"status", shape_->status},
                              {"message", shape_->message},
                              {"limit", shape_->limit},
                              {"used", used_},
                              {"remaining", remaining_},
                              {"reset", rate_limit_reset_seconds(reset_)},
                              {"reset_ms", to_ms(reset_)},
                              {"retry_after", rate_limit_reset_seconds(retry_after_)},
                              {"retry_after_ms", retry_after_ms_},
                              {"policy", shape_->policy}};
    if (shape_->keyed) details["key"] = key_;
    if (!shape_->label.empty()) details["label"] = shape_->label;
    return details;
  }

  const nlohmann::json* field(std::string_view name) const noexcept {
    if (name == "status") return &shape_->status;
    if (name == "message") return &shape_->message;
    if (name == "retry_after_ms") return &retry_after_ms_;
    return nullptr;
  }

 private:
  std::shared_ptr<const refusal_shape> shape_;
  std::string key_;
  std::uint64_t used_;
  std::uint64_t remaining_;
  duration reset_;
  duration retry_after_;
  nlohmann::json retry_after_ms_;
};

// The hit counter on the gate step: admit up to `limit` hits per window, refuse the rest.
template <class Counter>
struct rate_limit_gate : rate_limit_limiter<Counter> {
  struct ticket : rate_limit_limiter<Counter>::ticket {
    const limit_note* note = nullptr;  // the exchange's, valid while its run lasts
  };
  static constexpr gate_traits traits{.option = "rate_limit",
                                      .gate = "rateLimit",
                                      .passed = event_id::rate_limit_passed,
                                      .delayed = event_id::rate_limit_passed,  // never waits
                                      .rejected = event_id::rate_limit_rejected,
                                      .waits = false,
                                      .queues = false,
                                      .overflow = true};

  std::string label;
  std::string policy;
  rate_limit_headers headers = rate_limit_headers::none;
  std::shared_ptr<const refusal_shape> shape;  // what every refusal shares

  void note(exchange& ex, route_runtime& rt, std::string_view key, ticket& t, const gate_decision& d) const {
    const bool rejected = d.refused();
    limit_note& note = detail::add_limit_note(ex, "rateLimit", label, policy, key);
    note.limit = this->limit;
    note.used = t.hit.hits;
    note.remaining = rate_limit_remaining(this->limit, t.hit.hits);
    note.reset = t.reset;
    note.window = this->window;
    note.rejected = rejected;
    note.retry_after = rejected ? d.wait : duration::zero();
    note.header_mode = headers;
    // Legacy headers are absolute: only they need the wall clock.
    if (includes(headers, rate_limit_headers::legacy)) note.wall_ms = rt.ctx().wall_time_ms();
    t.note = &note;
  }

  std::uint64_t hits(const ticket& t) const { return t.note->used; }
  void fields(nlohmann::json& j, const ticket& t, const gate_decision&, event_id) const {
    j["hits"] = t.note->used;
    j["limit"] = t.note->limit;
    j["remaining"] = t.note->remaining;
    j["resetMs"] = to_ms(t.note->reset);
  }

  // The message and details are built only when read (refusal_fields).
  error refusal(std::string_view, const ticket& t, const gate_decision&) const {
    return deferred_error(errc::rate_limited, true, refusal_fields(shape, *t.note));
  }
};

template <class Counter>
std::unique_ptr<step> make(rate_limit_options& o, std::unique_ptr<step> inner, scope s) {
  rate_limit_gate<Counter> gate;
  gate.window = o.window;
  gate.limit = static_cast<std::uint64_t>(o.limit);
  gate.skip_failed = o.skip_failed;
  gate.skip_successful = o.skip_successful;
  gate.label = o.label;
  gate.policy = o.policy.empty() ? rate_limit_policy_name(gate.limit, o.window) : o.policy;
  gate.headers = o.headers;
  gate.shape = std::make_shared<const refusal_shape>(o, gate.limit, gate.policy);
  return make_gate_step(std::move(gate), gate_common{std::move(o.key), o.max_keys, std::move(o.label)},
                        std::move(inner), s);
}

// The counts in a decision_store: the store counts the hit (fixed window or sliding, as
// `counting` says) and answers its number; the limit, notes and refusal are the in-memory gate's.
struct rate_limit_store_policy {
  static constexpr gate_traits traits = rate_limit_gate<fixed_window>::traits;
  struct ticket {
    std::uint64_t hits = 0;
    duration reset{};
  };

  duration window{};
  std::uint64_t limit = 0;
  bool sliding = true;
  std::string label;
  std::string policy;
  rate_limit_headers headers = rate_limit_headers::none;
  std::shared_ptr<const refusal_shape> shape;

  store_query query(std::string_view key, const gate_arrival&) const {
    store_query q;
    q.what = sliding ? store_query::kind::sliding_window : store_query::kind::fixed_window;
    q.key = key;
    q.window = window;
    q.limit = limit;
    return q;
  }

  gate_decision interpret(const store_answer& s, const gate_arrival&, ticket& t) const {
    t.hits = s.hits;
    t.reset = std::max(s.reset, duration::zero());
    if (t.hits <= limit) return gate_decision::admit();
    return gate_decision::refuse(std::max(limit == 0 ? s.reset : s.retry_after, duration::zero()));
  }

  void note(exchange& ex, route_runtime& rt, std::string_view key, ticket& t, const gate_decision& d) const {
    limit_note& note = detail::add_limit_note(ex, "rateLimit", label, policy, key);
    note.limit = limit;
    note.used = t.hits;
    note.remaining = rate_limit_remaining(limit, t.hits);
    note.reset = t.reset;
    note.window = window;
    note.rejected = d.refused();
    note.retry_after = d.refused() ? d.wait : duration::zero();
    note.header_mode = headers;
    if (includes(headers, rate_limit_headers::legacy)) note.wall_ms = rt.ctx().wall_time_ms();
  }

  void fields(nlohmann::json& j, const ticket& t, const gate_decision&, event_id) const {
    j["hits"] = t.hits;
    j["limit"] = limit;
    j["remaining"] = rate_limit_remaining(limit, t.hits);
    j["resetMs"] = to_ms(t.reset);
  }

  error refusal(std::string_view key, const ticket& t, const gate_decision& d) const {
    limit_note note;
    note.key = key;
    note.used = t.hits;
    note.remaining = rate_limit_remaining(limit, t.hits);
    note.reset = t.reset;
    note.retry_after = d.wait;
    return deferred_error(errc::rate_limited, true, refusal_fields(shape, note));
  }
};

std::unique_ptr<step> make_store_rate_limit(rate_limit_options& o, std::unique_ptr<step> inner, scope s) {
  if (o.skip_failed || o.skip_successful)
    invalid_option("rate_limit", o.skip_failed ? "skip_failed" : "skip_successful",
                   "false with a store (a shared count is not given back)", true);
  rate_limit_store_policy p;
  p.window = o.window;
  p.limit = static_cast<std::uint64_t>(o.limit);
  p.sliding = o.counting == counting::sliding;
  p.label = o.label;
  p.policy = o.policy.empty() ? rate_limit_policy_name(p.limit, o.window) : o.policy;
  p.headers = o.headers;
  p.shape = std::make_shared<const refusal_shape>(o, p.limit, p.policy);
  return make_store_gate(
      std::move(p), std::move(o), std::nullopt,
      [s](rate_limit_options local) { return make_rate_limit(std::move(local), nullptr, s); }, std::move(inner), s);
}

}  // namespace

std::unique_ptr<step> make_rate_limit(rate_limit_options options, std::unique_ptr<step> inner, scope s) {
  options.validate();
  if (options.store) return make_store_rate_limit(options, std::move(inner), s);
  if (options.counting == counting::fixed) return make<fixed_window>(options, std::move(inner), s);
  return make<sliding_window>(options, std::move(inner), s);
}

}  // namespace rc
