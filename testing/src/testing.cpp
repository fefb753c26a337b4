// The compiled part of <rc/testing.hpp>: the test context's runs, its event capture and the
// endpoint overrides.
#include "rc/testing.hpp"

#include <fmt/format.h>

#include <charconv>

#include "http_internal.hpp"

namespace rc::testing {

namespace {

std::string seconds_text(time_point t) { return fmt::format("{}s", to_ms(t) / 1000.0); }

/// "RC5010" -> errc 5010; nothing for a missing or malformed code.
std::optional<errc> parse_code(const nlohmann::json& code) {
  if (!code.is_string()) return std::nullopt;
  const std::string& s = code.get_ref<const std::string&>();
  if (s.size() < 3 || s.compare(0, 2, "RC") != 0) return std::nullopt;
  int n = 0;
  const auto [end, ec] = std::from_chars(s.data() + 2, s.data() + s.size(), n);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return static_cast<errc>(n);
}

captured_error capture(const event& e) {
  const nlohmann::json* err = e.details.contains("error") ? &e.details["error"] : nullptr;
  std::string route;
  if (auto it = e.details.find("route"); it != e.details.end() && it->is_string()) route = it->get<std::string>();
  std::optional<errc> code;
  std::string message;
  bool retryable = true;
  nlohmann::json details = nlohmann::json::object();
  if (err && err->is_object()) {
    if (auto it = err->find("code"); it != err->end()) code = parse_code(*it);
    if (auto it = err->find("message"); it != err->end() && it->is_string()) message = it->get<std::string>();
    if (auto it = err->find("retryable"); it != err->end() && it->is_boolean()) retryable = it->get<bool>();
    if (auto it = err->find("details"); it != err->end() && it->is_object()) details = *it;
  } else if (err && err->is_string()) {
    message = err->get<std::string>();
  }
  if (!code) {
    // An error reported without a code of ours is wrapped, so every captured error has one.
    if (message.empty()) message = (err ? *err : e.details).dump();
    return {rc::error(errc::unknown, std::move(message), true, nullptr, std::move(details)), std::move(route),
            e.details, e.at};
  }
  return {rc::error(*code, std::move(message), retryable, nullptr, std::move(details)), std::move(route), e.details,
          e.at};
}

}  // namespace

/// Subscriptions of the test context: every context:error, and the exchanges' terminal events.
struct test_context::recorder {
  mutable std::mutex mutex;
  std::vector<captured_error> errors;
  exchange_counts counts;
  std::vector<subscription> subscriptions;

  explicit recorder(context& ctx) {
    subscriptions.push_back(ctx.on("context:error", [this](const event& e) {
      captured_error c = capture(e);
      std::lock_guard lock(mutex);
      errors.push_back(std::move(c));
    }));
    const auto count = [this](std::size_t exchange_counts::*field) {
      return [this, field](const event&) {
        std::lock_guard lock(mutex);
        ++(counts.*field);
      };
    };
    subscriptions.push_back(ctx.on("route:exchange:completed", count(&exchange_counts::completed)));
    subscriptions.push_back(ctx.on("route:exchange:failed", count(&exchange_counts::failed)));
    subscriptions.push_back(ctx.on("route:exchange:dropped", count(&exchange_counts::dropped)));
  }
};

test_context::test_context(test_options options)
    : options_(std::move(options)),
      ctx_(rc::virtual_time,
           context_options{.threads = 1, .shutdown_timeout = options_.shutdown_timeout, .id = options_.id}),
      recorder_(std::make_unique<recorder>(ctx_)) {
  if (options_.limit <= duration::zero()) invalid_option("test_context", "limit", "> 0", ms_text(options_.limit));
}

test_context::~test_context() {
  // Stop first, while the recorder still listens (the context would stop in its own destructor).
  ctx_.stop();
}

route_runtime& test_context::add(route_definition def) {
  if (!rules_.empty()) {
    for (auto& s : def.gates) apply(s);
    for (auto& s : def.steps) apply(s);
  }
  return ctx_.add(std::move(def));
}

void test_context::add_rule(matcher m, std::shared_ptr<endpoint_double> d) {
  rules_.push_back({std::move(m), std::move(d)});
}

// A wrapper (retry, throttle, timeout...) keeps its place; the endpoint step inside it is swapped.
void test_context::apply(std::unique_ptr<step>& s) const {
  if (!s) return;
  if (auto* w = dynamic_cast<wrapper*>(s.get())) {
    std::unique_ptr<step> inner = w->replace_inner(nullptr);
    apply(inner);
    w->replace_inner(std::move(inner));
    return;
  }
  if (auto* split = dynamic_cast<split_step*>(s.get())) {
    for (auto& u : split->sub_steps()) apply(u);
    return;
  }
  if (auto* choice = dynamic_cast<choice_step*>(s.get())) {
    for (auto& b : choice->branches())
      for (auto& u : b.steps) apply(u);
    return;
  }
  if (auto* multicast = dynamic_cast<multicast_step*>(s.get())) {
    for (auto& b : multicast->branches())
      for (auto& u : b) apply(u);
    return;
  }
  if (auto* batch = dynamic_cast<batch_step*>(s.get())) {
    for (auto& u : batch->sub_steps()) apply(u);
    return;
  }
  const auto* es = dynamic_cast<const endpoint_step*>(s.get());
  if (!es) return;
  for (const auto& r : rules_)
    if (r.match(*es, *s)) {
      s = es->with_double(r.with);
      return;
    }
}

template <class Done>
void test_context::run_until(const char* what, Done done) {
  const time_point started = ctx_.now();
  const time_point limit = started + options_.limit;
  for (;;) {
    ctx_.advance(duration::zero());  // everything ready or due now
    if (done()) return;
    const time_point next = ctx_.clock().next_due();
    if (next == time_point::max()) {
      const exchange_counts c = exchanges();
      throw run_limit_error(fmt::format(
          "{}: nothing is left to run at {} (virtual) and the condition is not met; exchanges ended so far: "
          "{} ({} completed, {} failed, {} dropped)",
          what, seconds_text(ctx_.now()), c.ended(), c.completed, c.failed, c.dropped));
    }
    if (next > limit) {
      const exchange_counts c = exchanges();
      throw run_limit_error(fmt::format(
          "{}: gave up at {} (virtual) after the limit of {} of virtual time (test_options::limit); the next "
          "wait was due at {}, {} still pending; exchanges ended so far: {} ({} completed, {} failed, {} dropped). "
          "An endless source or a route that never finishes?",
          what, seconds_text(ctx_.now()), seconds_text(time_point{} + options_.limit), seconds_text(next),
          ctx_.clock().pending(), c.ended(), c.completed, c.failed, c.dropped));
    }
    ctx_.advance_to(next);
  }
}

void test_context::start_and_wait_ready() {
  ctx_.start();
  ctx_.advance(duration::zero());
}

void test_context::advance(duration d) { ctx_.advance(d); }
void test_context::advance_to(time_point t) { ctx_.advance_to(t); }

void test_context::run_until_idle() {
  // Idle: nothing ready and nothing due at any time. A wait without a due time (a direct source
  // serving its name, a queue's head) is woken only by other work, of which there is none.
  run_until("run_until_idle()", [this] { return ctx_.clock().next_due() == time_point::max(); });
}

void test_context::run_until_completed(std::size_t n) {
  const std::string what = fmt::format("run_until_completed({})", n);
  run_until(what.c_str(), [this, n] { return exchanges().ended() >= n; });
}

void test_context::drain() { ctx_.drain(); }
stop_result test_context::stop() { return ctx_.stop(); }

stop_result test_context::test() {
  start_and_wait_ready();
  drain();
  return stop();
}

exchange_counts test_context::exchanges() const {
  std::lock_guard lock(recorder_->mutex);
  return recorder_->counts;
}

std::vector<captured_error> test_context::errors() const {
  std::lock_guard lock(recorder_->mutex);
  return recorder_->errors;
}

rc::error http_error(int status, std::string url, std::string method, std::optional<duration> retry_after) {
  const bool retryable = status >= 500 || status == 429;
  nlohmann::json details = {{"status", status}, {"url", url}, {"method", method}};
  if (retry_after && (status == 429 || status == 503))
    details["retry_after_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(*retry_after).count();
  std::string message =
      fmt::format("http: {} {} answered {} {}", method, url, status, http_detail::reason_phrase(status));
  return rc::error(errc::step_failed, std::move(message), retryable, nullptr, std::move(details));
}

}  // namespace rc::testing
