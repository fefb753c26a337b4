#include "rc/wrappers/throttle.hpp"

#include <cmath>
#include <mutex>

#include "rc/gates/keyed_lru.hpp"
#include "rc/gates/token_bucket.hpp"
#include "rc/route.hpp"

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

struct keyed_bucket {
  token_bucket bucket;
  std::uint32_t waiters = 0;
};

class throttle_step final : public wrapper {
 public:
  throttle_step(throttle_options o, std::unique_ptr<step> inner, rc::scope s)
      : wrapper(std::move(inner), s),
        options_(std::move(o)),
        params_(bucket_params::from(options_.rate, to_duration(options_.per), options_.burst)),
        table_(options_.max_keys) {}

  task<outcome> run(exchange& ex, route_runtime& rt) override {
    const time_point start = rt.now();
    std::string key;
    if (options_.key) {
      try {
        key = options_.key(ex);
      } catch (...) {
        co_return outcome::failed(std::make_exception_ptr(error(
            errc::misconfigured,
            "throttle({ key }) selector threw; it must return a string for every exchange (" +
                message_of(std::current_exception()) + ")",
            false, std::current_exception())));
      }
    }

    decision d = decide(key, rt.now());
    if (!d.admitted) {
      emit_rejected(ex, rt, key, d.wait);
      co_return outcome::failed(std::make_exception_ptr(rejection(key, d.wait, d.why)));
    }
    if (d.wait == duration::zero()) {
      emit_passed(ex, rt, key, false, duration::zero());
      co_return co_await run_inner(ex, rt);
    }

    rt.events().emit(event_id::throttle_delayed, [&] {
      auto j = with_key(identity(ex, rt, options_.label), key);
      j["waitMs"] = to_ms(d.wait);
      return j;
    });
    const wait_result r = co_await rt.clock().wait_until(d.due, &rt.intake(), ex.abort_signal());
    const bool client_gone = r == wait_result::cancelled && ex.abort_signal() && ex.abort_signal()->fired() &&
                             !rt.intake().fired();
    finish_wait(key, rt.now(), client_gone);
    if (client_gone) co_return outcome::dropped("client-gone");
    emit_passed(ex, rt, key, true, rt.now() - start);
    co_return co_await run_inner(ex, rt);
  }

 private:
  struct decision {
    bool admitted;
    duration wait;     // admitted: how long to wait; refused: retry after
    time_point due;
    const char* why;   // refusal reason
  };

  static bool idle(const keyed_bucket& b, time_point now, const bucket_params& p) {
    return b.waiters == 0 && b.bucket.is_full(now, p);
  }

  decision decide(const std::string& key, time_point now) {
    std::lock_guard lock(mutex_);
    keyed_bucket* b = &single_;
    if (options_.key) {
      b = table_.touch(key, [&](const keyed_bucket& s) { return idle(s, now, params_); });
      if (!b) {
        // Every evictable candidate is busy: refuse rather than meter this key with nothing.
        return {false, std::chrono::duration_cast<duration>(std::chrono::duration<double, std::nano>(params_.interval_ns)),
                now, "key table full"};
      }
    }
    if (options_.mode == throttle_mode::reject) {
      const auto r = b->bucket.try_acquire(now, params_);
      return {r.admitted, r.retry_after, now, "rate limit exceeded"};
    }
    const duration wait = b->bucket.peek_wait(now, params_);
    if (wait > duration::zero()) {
      if (options_.max_wait && wait > *options_.max_wait) return {false, wait, now, "wait would exceed max_wait"};
      if (options_.max_queue && waiting_ >= *options_.max_queue)
        return {false, wait, now, "queue is full (max_queue)"};
    }
    b->bucket.reserve(now, params_);
    if (wait > duration::zero()) {
      ++b->waiters;
      ++waiting_;
    }
    return {true, wait, now + wait, nullptr};
  }

  void finish_wait(const std::string& key, time_point now, bool give_back) {
    std::lock_guard lock(mutex_);
    keyed_bucket* b = options_.key ? table_.find(key) : &single_;
    --waiting_;
    if (!b) return;  // cannot happen: a bucket with waiters is never evicted
    --b->waiters;
    if (give_back) b->bucket.give_back(now, params_);
  }

  error rejection(const std::string& key, duration retry_after, const char* why) const {
    const double ms = to_ms(retry_after);
    std::string msg = "throttle rejected the exchange: ";
    msg += why;
    if (options_.key) msg += fmt::format(" for key \"{}\"", key);
    msg += fmt::format(". Retry after ~{}ms.", static_cast<long long>(std::ceil(ms)));
    nlohmann::json details = {{"gate", "throttle"}, {"retry_after_ms", ms}};
    if (options_.key) details["key"] = key;
    if (!options_.label.empty()) details["label"] = options_.label;
    return error(errc::rate_limited, std::move(msg), true, nullptr, std::move(details));
  }

  nlohmann::json with_key(nlohmann::json j, const std::string& key) const {
    if (options_.key) j["key"] = key;
    return j;
  }

  void emit_passed(const exchange& ex, route_runtime& rt, const std::string& key, bool waited, duration elapsed) {
    rt.events().emit(event_id::throttle_passed, [&] {
      auto j = with_key(identity(ex, rt, options_.label), key);
      j["waited"] = waited;
      j["elapsed"] = to_ms(elapsed);
      return j;
    });
  }

  void emit_rejected(const exchange& ex, route_runtime& rt, const std::string& key, duration retry_after) {
    rt.events().emit(event_id::throttle_rejected, [&] {
      auto j = with_key(identity(ex, rt, options_.label), key);
      j["retryAfterMs"] = to_ms(retry_after);
      return j;
    });
  }

  throttle_options options_;
  bucket_params params_;
  std::mutex mutex_;  // the bucket(s) and counters: routes may run on several threads
  keyed_bucket single_;
  keyed_lru<keyed_bucket> table_;
  std::size_t waiting_ = 0;
};

}  // namespace

std::unique_ptr<step> make_throttle(throttle_options options, std::unique_ptr<step> inner, scope s) {
  options.validate();
  return std::make_unique<throttle_step>(std::move(options), std::move(inner), s);
}

}  // namespace rc
