// store_gate_step: a rate gate whose decisions a decision_store takes (rc/gates/decision_store.hpp),
// so that every instance naming the same store keys shares one limit.
//
// Per exchange: the key (a selector that throws fails the exchange as in gate_step), one
// asynchronous decide() on the store, then the policy P turns the answer into admit, wait or
// refuse. A wait is a timer from the answer (the store's reservation), cut short by shutdown
// (admitted) or by the client going away (dropped "client-gone"; a throttle reservation is not
// given back). Events and counters are the in-memory gate's (route:throttle:passed, ...), with
// "store" added to the fields.
//
// When the store fails (decide() throws: timeout, store gone), the store's on_error decides:
// fail_open passes the exchange unmetered, fail_closed refuses it (RC5013, details
// {store_failed: true, retry_after_ms: 1000}), local runs the in-process fallback gate (the same
// options, in memory) and continues as it says. route:store:failed is emitted when the gate's
// decisions start failing, route:store:recovered when one succeeds again.
//
// A policy P (see wrappers/throttle.cpp, rate_limit.cpp, slow_down.cpp):
//   static constexpr gate_traits traits;  using ticket;
//   store_query query(std::string_view key, const gate_arrival&) const;
//   gate_decision interpret(const store_answer&, const gate_arrival&, ticket&) const;
//   void note(exchange&, route_runtime&, std::string_view key, ticket&, const gate_decision&) const;
//   void fields(nlohmann::json&, const ticket&, const gate_decision&, event_id) const;
//   error refusal(std::string_view key, const ticket&, const gate_decision&) const;
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "rc/error.hpp"
#include "rc/events.hpp"
#include "rc/gate_step.hpp"
#include "rc/gates/decision_store.hpp"
#include "rc/route.hpp"

namespace rc {

template <class P>
class store_gate_step final : public wrapper, public keyed_gate {
  static constexpr gate_traits traits = P::traits;
  using ticket = typename P::ticket;

 public:
  store_gate_step(P policy, std::shared_ptr<decision_store> store, gate_common common, std::unique_ptr<step> fallback,
                  std::optional<std::size_t> max_waiting, std::unique_ptr<step> inner, rc::scope s)
      : wrapper(std::move(inner), s),
        policy_(std::move(policy)),
        store_(std::move(store)),
        common_(std::move(common)),
        fallback_(std::move(fallback)),
        max_waiting_(max_waiting) {}

  std::string_view wrapper_kind() const noexcept override { return traits.gate; }
  bool has_counters() const noexcept override { return true; }
  gate_snapshot read_counters() const override { return counters_.read(); }
  std::string_view gate_label() const noexcept override { return common_.label; }
  keyed_gate_stats stats() const override {
    // The keys live in the store; only the local fallback keeps any here.
    if (auto* g = dynamic_cast<const keyed_gate*>(fallback_.get())) return g->stats();
    return {};
  }
  const decision_store& store() const noexcept { return *store_; }

  task<outcome> run(exchange& ex, route_runtime& rt) override {
    std::string key;
    if (common_.key) {
      try {
        key = common_.key(ex);
      } catch (const error&) {
        co_return outcome::failed(std::current_exception());
      } catch (...) {
        co_return outcome::failed(std::make_exception_ptr(
            error(errc::step_failed,
                  fmt::format("{}({{ key }}) selector threw: {}", traits.option, message_of(std::current_exception())),
                  true, std::current_exception())));
      }
    }
    if (max_waiting_ && waiting_.load(std::memory_order_relaxed) >= *max_waiting_) {
      ticket t{};
      const gate_decision d = gate_decision::refuse(duration::zero(), "max_queue reached on this instance");
      count([](gate_counters& c) { c.rejected_locked(); });
      co_return refuse(ex, rt, key, t, d);
    }

    gate_arrival in{.now = rt.now(), .can_queue = false, .deadline = ex.deadline()};
    std::optional<store_answer> answer;
    std::exception_ptr failure;
    try {
      const store_query q = policy_.query(key, in);
      answer = co_await store_->decide(q);
    } catch (...) {
      failure = std::current_exception();
    }
    if (!answer) co_return co_await on_failure(ex, rt, key, failure);
    if (failing_.load(std::memory_order_relaxed)) recovered(ex, rt);

    in.now = rt.now();
    ticket t{};
    gate_decision d;
    try {
      d = policy_.interpret(*answer, in, t);
    } catch (...) {
      co_return outcome::failed(std::current_exception());
    }
    policy_.note(ex, rt, key, t, d);
    if (d.refused()) {
      count([](gate_counters& c) { c.rejected_locked(); });
      co_return refuse(ex, rt, key, t, d);
    }
    bool waited = false;
    if (!d.admitted() && d.wait > duration::zero()) {
      count([](gate_counters& c) { c.delayed_locked(); });
      rt.events().emit(traits.delayed, [&] { return fields(ex, rt, key, t, d, traits.delayed); });
      waiting_.fetch_add(1, std::memory_order_relaxed);
      const wait_result r = co_await rt.clock().wait_until(in.now + d.wait, &rt.intake(), ex.abort_signal());
      waiting_.fetch_sub(1, std::memory_order_relaxed);
      const bool client_gone = r == wait_result::cancelled && ex.abort_signal() != nullptr &&
                               ex.abort_signal()->fired() && !rt.intake().fired();
      if (client_gone) co_return outcome::dropped("client-gone");
      waited = true;
      counters_.passed_after(rt.now() - in.now);
    } else {
      count([](gate_counters& c) { c.passed_locked(); });
    }
    rt.events().emit(traits.passed, [&] {
      auto j = fields(ex, rt, key, t, d, traits.passed);
      if constexpr (traits.waits) {
        j["waited"] = waited;
        j["elapsed"] = to_ms(waited ? rt.now() - in.now : duration::zero());
      }
      if (answer->admit_at_us != 0) j["admitAtUs"] = answer->admit_at_us;
      return j;
    });
    co_return co_await run_inner(ex, rt);
  }

 private:
  template <class F>
  void count(F f) {
    std::lock_guard lock(counters_mutex_);
    f(counters_);
  }

  task<outcome> on_failure(exchange& ex, route_runtime& rt, const std::string& key, std::exception_ptr failure) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    const error err = to_error(failure);
    if (!failing_.exchange(true)) {
      rt.events().emit(event_id::store_failed, [&] {
        auto j = identity(ex, rt, common_.label);
        j["gate"] = traits.gate;
        j["store"] = store_->name();
        j["onError"] = on_error_name();
        j["error"] = {{"code", err.code_string()}, {"message", err.message()}};
        if (common_.key) j["key"] = key;
        return j;
      });
    }
    switch (store_->on_error()) {
      case store_on_error::fail_open:
        count([](gate_counters& c) { c.passed_locked(); });
        rt.events().emit(traits.passed, [&] {
          auto j = identity(ex, rt, common_.label);
          if (common_.key) j["key"] = key;
          j["store"] = store_->name();
          j["storeFailed"] = true;
          if constexpr (traits.waits) {
            j["waited"] = false;
            j["elapsed"] = 0.0;
          }
          return j;
        });
        break;
      case store_on_error::fail_closed: {
        count([](gate_counters& c) { c.rejected_locked(); });
        rt.events().emit(traits.rejected, [&] {
          auto j = identity(ex, rt, common_.label);
          if (common_.key) j["key"] = key;
          j["store"] = store_->name();
          j["storeFailed"] = true;
          j["retryAfterMs"] = 1000.0;
          return j;
        });
        nlohmann::json details = {
            {"gate", traits.gate}, {"retry_after_ms", 1000.0}, {"store", store_->name()}, {"store_failed", true}};
        if (common_.key) details["key"] = key;
        if (!common_.label.empty()) details["label"] = common_.label;
        co_return outcome::failed(std::make_exception_ptr(
            error(errc::rate_limited,
                  fmt::format("{} refused the exchange: its {} store failed ({}) and on_error is fail_closed. Retry "
                              "after ~1000ms.",
                              traits.option, store_->name(), err.message()),
                  true, failure, std::move(details))));
      }
      case store_on_error::local: {
        outcome o = co_await fallback_->run(ex, rt);
        if (!o.ok()) co_return o;
        break;
      }
    }
    co_return co_await run_inner(ex, rt);
  }

  void recovered(exchange& ex, route_runtime& rt) {
    if (!failing_.exchange(false)) return;
    rt.events().emit(event_id::store_recovered, [&] {
      auto j = identity(ex, rt, common_.label);
      j["gate"] = traits.gate;
      j["store"] = store_->name();
      j["failedDecisions"] = failures_.load(std::memory_order_relaxed);
      return j;
    });
  }

  std::string_view on_error_name() const noexcept {
    switch (store_->on_error()) {
      case store_on_error::fail_open:
        return "fail_open";
      case store_on_error::fail_closed:
        return "fail_closed";
      case store_on_error::local:
        return "local";
    }
    return "";
  }

  outcome refuse(exchange& ex, route_runtime& rt, const std::string& key, ticket& t, const gate_decision& d) {
    rt.events().emit(traits.rejected, [&] {
      auto j = fields(ex, rt, key, t, d, traits.rejected);
      j["retryAfterMs"] = to_ms(d.wait);
      return j;
    });
    return outcome::failed(
        std::make_exception_ptr(policy_.refusal(common_.key ? std::string_view(key) : std::string_view{}, t, d)));
  }

  nlohmann::json fields(const exchange& ex, const route_runtime& rt, const std::string& key, const ticket& t,
                        const gate_decision& d, event_id which) const {
    auto j = identity(ex, rt, common_.label);
    if (common_.key) j["key"] = key;
    j["store"] = store_->name();
    policy_.fields(j, t, d, which);
    return j;
  }

  P policy_;
  std::shared_ptr<decision_store> store_;
  gate_common common_;
  std::unique_ptr<step> fallback_;  // on_error local: the in-memory gate, no inner step
  std::optional<std::size_t> max_waiting_;
  std::atomic<std::size_t> waiting_{0};
  std::atomic<bool> failing_{false};
  std::atomic<std::uint64_t> failures_{0};
  std::mutex counters_mutex_;
  gate_counters counters_;
};

/// The store gate for a gate's options `o` (with `.store` set): when `on_error` is `local`, its
/// in-process twin, `make_local(o without the store)`, is the fallback; then the step itself.
template <class P, class Options, class MakeLocal>
std::unique_ptr<step> make_store_gate(P policy, Options o, std::optional<std::size_t> max_waiting, MakeLocal make_local,
                                      std::unique_ptr<step> inner, rc::scope s) {
  std::unique_ptr<step> fallback;
  if (o.store->on_error() == store_on_error::local) {
    Options local = o;
    local.store = nullptr;
    fallback = make_local(std::move(local));
  }
  auto store = std::move(o.store);
  return std::make_unique<store_gate_step<P>>(std::move(policy), std::move(store),
                                              gate_common{std::move(o.key), o.max_keys, std::move(o.label)},
                                              std::move(fallback), max_waiting, std::move(inner), s);
}

}  // namespace rc
