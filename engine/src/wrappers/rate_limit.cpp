#include "rc/wrappers/rate_limit.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "keyed_windows.hpp"
#include "rc/context.hpp"
#include "rc/route.hpp"

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
        headers(o.headers),
        policy(policy),
        label(o.label),
        reached(fmt::format("rate_limit refused the exchange: limit of {} per {} reached", limit, ms_text(o.window))) {}

  nlohmann::json status;   // details' "status"
  nlohmann::json message;  // details' "message"
  std::uint64_t limit;
  duration window;
  bool keyed;
  rate_limit_headers headers;
  std::string policy;
  std::string label;
  std::string reached;  // the message's fixed start
};

// One refusal's RC5013 fields, built only when read: the message and the 13-field details with
// their header list are what an eager error held, byte for byte. A transport reads status,
// message and retry_after_ms through error::detail() without building the rest (the headers are
// on the exchange's limit note already).
class refusal_fields final : public error::deferred {
 public:
  refusal_fields(std::shared_ptr<const refusal_shape> shape, const limit_note& note, std::int64_t wall_ms)
      : shape_(std::move(shape)),
        key_(shape_->keyed ? note.key : std::string()),
        used_(note.used),
        remaining_(note.remaining),
        reset_(note.reset),
        retry_after_(note.retry_after),
        wall_ms_(wall_ms),
        retry_after_ms_(to_ms(note.retry_after)) {}

  std::string message() const override {
    std::string msg = shape_->reached;
    if (shape_->keyed) msg += fmt::format(" for key \"{}\"", key_);
    msg += fmt::format(" (hit {}). Retry after ~{}ms.", used_, static_cast<long long>(std::ceil(to_ms(retry_after_))));
    return msg;
  }

  nlohmann::json details() const override {
    auto headers = nlohmann::json::array();
    if (shape_->headers != rate_limit_headers::none) {
      const rate_limit_info info{.limit = shape_->limit,
                                 .used = used_,
                                 .remaining = remaining_,
                                 .reset_in = reset_,
                                 .window = shape_->window,
                                 .key = key_,
                                 .policy_name = shape_->policy};
      const std::string retry_after_seconds = std::to_string(rate_limit_reset_seconds(retry_after_));
      for (auto& [name, value] : rate_limit_header_list(shape_->headers, info, wall_ms_, rate_limit_outcome::rejected,
                                                        std::string_view(retry_after_seconds)))
        headers.push_back({std::move(name), std::move(value)});
    }
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
                              {"policy", shape_->policy},
                              {"headers", std::move(headers)}};
    if (shape_->keyed) details["key"] = key_;
    if (!shape_->label.empty()) details["label"] = shape_->label;
    return details;
  }

  const nlohmann::json* field(std::string_view name) const noexcept override {
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
  std::int64_t wall_ms_;  // the legacy headers' clock, as the note's were formatted
  nlohmann::json retry_after_ms_;
};

template <class Counter>
class rate_limit_step final : public wrapper, public keyed_gate {
 public:
  rate_limit_step(rate_limit_options o, std::unique_ptr<step> inner, rc::scope s)
      : wrapper(std::move(inner), s),
        options_(std::move(o)),
        limit_(static_cast<std::uint64_t>(options_.limit)),
        policy_(options_.policy.empty() ? rate_limit_policy_name(limit_, options_.window) : options_.policy),
        windows_(static_cast<bool>(options_.key), options_.max_keys),
        shape_(std::make_shared<const refusal_shape>(options_, limit_, policy_)) {}

  keyed_gate_stats stats() const override {
    std::lock_guard lock(mutex_);
    return windows_.stats();
  }

  // A limiter never waits: with a synchronous inner step (or none, at route scope) it runs
  // without a coroutine frame, and a route of synchronous steps stays on the fast path.
  bool synchronous() const noexcept override { return inner_is_sync(); }

  outcome run_now(exchange& ex, route_runtime& rt) override {
    counted c = count(ex, rt);
    if (!c.admitted) return std::move(c.refusal);
    if (!options_.skip_successful && !options_.skip_failed) return run_inner_now(ex, rt);
    if (!inner_) return give_back_at_finish(ex, rt, c);
    return give_back_if_skipped(rt, c, run_inner_now(ex, rt));
  }

  task<outcome> run(exchange& ex, route_runtime& rt) override {
    counted c = count(ex, rt);
    if (!c.admitted) co_return std::move(c.refusal);
    if (!options_.skip_successful && !options_.skip_failed) co_return co_await run_inner(ex, rt);
    if (!inner_) co_return give_back_at_finish(ex, rt, c);
    outcome o = co_await run_inner(ex, rt);
    co_return give_back_if_skipped(rt, c, std::move(o));
  }

 private:
  struct counted {
    bool admitted = false;
    outcome refusal;  // when not admitted: RC5013, or RC5003 from the key selector
    std::string key;
    bool overflow = false;
    time_point counted_until{};
  };

  // Counts the hit, attaches the limit note, emits the event; refuses past the limit.
  counted count(exchange& ex, route_runtime& rt) {
    counted c;
    if (options_.key) {
      try {
        c.key = options_.key(ex);
      } catch (...) {
        c.refusal = outcome::failed(std::make_exception_ptr(
            error(errc::misconfigured,
                  "rate_limit({ key }) selector threw; it must return a string for every exchange (" +
                      message_of(std::current_exception()) + ")",
                  false, std::current_exception())));
        return c;
      }
    }

    // Count at the gate: behind a slow_down that is after the delay, not at the caller's arrival.
    // The time is read under the lock so that a counter never sees time go backwards.
    time_point now{};
    hit_result hit{};
    bool rejected = false;
    time_point retry_at{};
    {
      std::lock_guard lock(mutex_);
      now = rt.now();
      retry_at = now;
      const auto counted_hit = windows_.increment(c.key, now, options_.window);
      hit = counted_hit.hit;
      c.overflow = counted_hit.overflow;
      rejected = hit.hits > limit_;
      if (rejected) {
        // express: a refusal is a failed response, so skip_failed gives its hit back at once.
        if (options_.skip_failed) windows_.give_back(c.key, c.overflow, now, hit.counted_until);
        retry_at = counted_hit.counter->retry_at(now, limit_);
        if (retry_at == time_point::max()) retry_at = hit.reset_at;  // limit 0: never; say the reset
      }
    }
    c.counted_until = hit.counted_until;

    const duration reset = std::max(hit.reset_at - now, duration::zero());
    const duration retry_after = std::max(retry_at - now, duration::zero());
    std::int64_t wall_ms = 0;
    const limit_note& note = add_note(ex, rt, c.key, hit.hits, reset, rejected, retry_after, wall_ms);

    if (rejected) {
      rt.events().emit(event_id::rate_limit_rejected, [&] {
        auto j = fields(ex, rt, c.key, c.overflow, note);
        j["retryAfterMs"] = to_ms(retry_after);
        return j;
      });
      c.refusal = outcome::failed(
          std::make_exception_ptr(error(errc::rate_limited, std::make_shared<const refusal_fields>(shape_, note, wall_ms), true)));
      return c;
    }
    rt.events().emit(event_id::rate_limit_passed, [&] { return fields(ex, rt, c.key, c.overflow, note); });
    c.admitted = true;
    return c;
  }

  // Route scope: the run's final outcome decides.
  outcome give_back_at_finish(exchange& ex, route_runtime& rt, const counted& c) {
    ex.on_finish([this, &rt, key = c.key, overflow = c.overflow, until = c.counted_until](bool succeeded) {
      if (succeeded ? options_.skip_successful : options_.skip_failed) give_back(key, overflow, rt.now(), until);
    });
    return outcome::proceed();
  }

  // Step scope: the wrapped step's outcome decides.
  outcome give_back_if_skipped(route_runtime& rt, const counted& c, outcome o) {
    if (o.ok() ? options_.skip_successful : options_.skip_failed)
      give_back(c.key, c.overflow, rt.now(), c.counted_until);
    return o;
  }

  void give_back(const std::string& key, bool overflow, time_point now, time_point counted_until) {
    std::lock_guard lock(mutex_);
    windows_.give_back(key, overflow, now, counted_until);
  }

  limit_note& add_note(exchange& ex, route_runtime& rt, const std::string& key, std::uint64_t hits, duration reset,
                       bool rejected, duration retry_after, std::int64_t& wall_ms) const {
    limit_note note;
    note.gate = "rateLimit";
    note.label = options_.label;
    note.limit = limit_;
    note.used = hits;
    note.remaining = rate_limit_remaining(limit_, hits);
    note.reset = reset;
    note.window = options_.window;
    note.policy = policy_;
    note.key = key;
    note.rejected = rejected;
    note.retry_after = retry_after;
    if (options_.headers != rate_limit_headers::none) {
      const rate_limit_info info{.limit = limit_,
                                 .used = hits,
                                 .remaining = note.remaining,
                                 .reset_in = reset,
                                 .window = options_.window,
                                 .key = key,
                                 .policy_name = policy_};
      // Legacy headers are absolute: only they need the wall clock.
      wall_ms = includes(options_.headers, rate_limit_headers::legacy) ? rt.ctx().wall_time_ms() : 0;
      const std::string retry_after_seconds = std::to_string(rate_limit_reset_seconds(retry_after));
      note.headers = rate_limit_header_list(options_.headers, info, wall_ms,
                                            rejected ? rate_limit_outcome::rejected : rate_limit_outcome::passed,
                                            std::string_view(retry_after_seconds));
    }
    return ex.limit_notes().emplace_back(std::move(note));
  }

  nlohmann::json fields(const exchange& ex, const route_runtime& rt, const std::string& key, bool overflow,
                        const limit_note& note) const {
    auto j = identity(ex, rt, options_.label);
    if (options_.key) j["key"] = key;
    if (overflow) j["overflow"] = true;  // counted in the shared window: the key table was full
    j["hits"] = note.used;
    j["limit"] = note.limit;
    j["remaining"] = note.remaining;
    j["resetMs"] = to_ms(note.reset);
    return j;
  }

  rate_limit_options options_;
  std::uint64_t limit_;
  std::string policy_;
  mutable std::mutex mutex_;  // the counters: routes may run on several threads
  detail::keyed_windows<Counter> windows_;
  std::shared_ptr<const refusal_shape> shape_;  // what every refusal shares
};

}  // namespace

std::unique_ptr<step> make_rate_limit(rate_limit_options options, std::unique_ptr<step> inner, scope s) {
  options.validate();
  if (options.counting == counting::fixed)
    return std::make_unique<rate_limit_step<fixed_window>>(std::move(options), std::move(inner), s);
  return std::make_unique<rate_limit_step<sliding_window>>(std::move(options), std::move(inner), s);
}

}  // namespace rc
