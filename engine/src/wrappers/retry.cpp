#include "rc/wrappers/retry.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "rc/route.hpp"

namespace rc {

void retry_options::validate() const {
  if (max_attempts < 1) invalid_option("retry", "max_attempts", "an integer >= 1", max_attempts);
  if (backoff < duration::zero()) invalid_option("retry", "backoff", "a duration >= 0", ms_text(backoff));
  if (!std::isfinite(factor) || factor < 1) invalid_option("retry", "factor", "a finite number >= 1", factor);
  if (max_backoff < std::chrono::milliseconds(1))
    invalid_option("retry", "max_backoff", "a duration >= 1ms", ms_text(max_backoff));
  if (!std::isfinite(jitter) || jitter < 0 || jitter > 1)
    invalid_option("retry", "jitter", "jitter::none, jitter::full or a number in [0, 1]", jitter);
}

namespace {

double unit_random() {
  thread_local std::mt19937_64 engine{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(engine);
}

class retry_step final : public wrapper {
 public:
  retry_step(retry_options o, std::unique_ptr<step> inner, rc::scope s)
      : wrapper(std::move(inner), s), options_(std::move(o)) {}

  std::string_view wrapper_kind() const noexcept override { return "retry"; }

  // Around a synchronous step, the first attempt runs now: a success (or a failure that is not
  // retried) ends here with no frame. A failure to retry goes on in resume() from attempt 1.
  bool try_run_now(exchange& ex, route_runtime& rt, outcome& out) override {
    if (!inner_is_sync()) return false;
    emit_started(ex, rt);
    out = run_inner_now(ex, rt);
    return !retried(ex, rt, 1, out);
  }

  task<outcome> resume(exchange& ex, route_runtime& rt, outcome partial) override {
    if (!partial.is_fail()) return run(ex, rt);  // try_run_now did nothing (asynchronous inner step)
    return attempts(ex, rt, 1, std::move(partial));
  }

  task<outcome> run(exchange& ex, route_runtime& rt) override {
    emit_started(ex, rt);
    return attempts(ex, rt, 0, outcome{});
  }

 private:
  // Attempt `attempt` ended in `o`, a failure to retry (none yet when 0); runs the next ones.
  task<outcome> attempts(exchange& ex, route_runtime& rt, int attempt, outcome o) {
    auto& bus = rt.events();
    for (;;) {
      if (attempt > 0) {
        const duration wait = backoff_for(attempt, to_error(o.error));
        bus.emit(event_id::retry_attempt, [&] {
          auto j = identity(ex, rt);
          j["attemptNumber"] = attempt;
          j["maxAttempts"] = options_.max_attempts;
          j["backoffMs"] = to_ms(wait);
          j["lastError"] = error_json(o.error, false);
          return j;
        });
        if (wait > duration::zero()) {
          const wait_result r = co_await rt.clock().wait_until(rt.now() + wait, &rt.intake(), ex.abort_signal());
          if (r == wait_result::cancelled) {
            emit_stopped(ex, rt, attempt, false, &o.error);
            co_return o;
          }
        }
      }
      ++attempt;
      if (inner_is_sync())
        o = run_inner_now(ex, rt);
      else
        o = co_await run_inner(ex, rt);
      if (!retried(ex, rt, attempt, o)) co_return o;
    }
  }

  // After attempt `attempt` ended in `o`: false when it is the last (retry:stopped emitted).
  bool retried(const exchange& ex, route_runtime& rt, int attempt, const outcome& o) {
    if (!o.is_fail()) {
      emit_stopped(ex, rt, attempt, true, nullptr);
      return false;
    }
    if (attempt >= options_.max_attempts || !should_retry(to_error(o.error))) {
      emit_stopped(ex, rt, attempt, false, &o.error);
      return false;
    }
    return true;
  }

  void emit_started(const exchange& ex, route_runtime& rt) {
    rt.events().emit(event_id::retry_started, [&] {
      auto j = identity(ex, rt);
      j["maxAttempts"] = options_.max_attempts;
      return j;
    });
  }

  bool should_retry(const error& err) const {
    if (options_.retry_on) return options_.retry_on(err);
    return err.retryable();
  }

  duration backoff_for(int attempt, const error& err) const {
    double base_ns = 0;
    if (options_.backoff > duration::zero()) {
      base_ns = static_cast<double>(options_.backoff.count()) * std::pow(options_.factor, attempt - 1);
      base_ns = std::min(base_ns, static_cast<double>(options_.max_backoff.count()));
    }
    double wait_ns = base_ns;
    if (options_.jitter > 0)
      wait_ns = base_ns * (1.0 - options_.jitter * (options_.random ? options_.random() : unit_random()));
    // A server or gate that said when to come back sets the minimum wait.
    if (const auto* it = err.detail("retry_after_ms"); it && it->is_number())
      wait_ns = std::max(wait_ns, it->get<double>() * 1e6);
    return duration(static_cast<duration::rep>(std::ceil(wait_ns)));
  }

  void emit_stopped(const exchange& ex, route_runtime& rt, int attempt, bool success, const std::exception_ptr* e) {
    rt.events().emit(event_id::retry_stopped, [&] {
      auto j = identity(ex, rt);
      j["attemptNumber"] = attempt;
      j["success"] = success;
      if (e) j["error"] = error_json(*e, false);
      return j;
    });
  }

  retry_options options_;
};

}  // namespace

std::unique_ptr<step> make_retry(retry_options options, std::unique_ptr<step> inner, scope s) {
  options.validate();
  return std::make_unique<retry_step>(std::move(options), std::move(inner), s);
}

}  // namespace rc
