// <rc/testing.hpp>: the kit for testing your routes (CMake target routecraft::testing). No
// network, no sleeping: everything runs on a virtual clock that only the test moves.
//
//   rc::testing::test_context tc;                 // an rc::context on the virtual clock
//   rc::testing::mock<rc::http_response> api;     // stands in for rc::http(...)
//   api.latency(50ms).reply(rc::json_response({{"ok", true}}));
//   tc.override<rc::http_client_endpoint>(api);   // every rc::http endpoint of the routes added after
//   tc.add(my_route());                           // the production route, unchanged
//   tc.start_and_wait_ready();
//   tc.run_until_completed(5);                    // virtual time jumps from wait to wait
//   CHECK(api.count() == 5);
//
// test_context: start_and_wait_ready(), advance(d), run_until_idle(), run_until_completed(n),
// drain(), stop(), test() (all of them in order); errors() holds every context:error. The
// run_until helpers stop at a virtual-time limit (test_options::limit) with run_limit_error
// saying what was still pending, so a stuck route fails the test instead of hanging it.
//
// Replacing endpoints: override<Endpoint>(double[, predicate]) swaps every endpoint of that C++
// type (the predicate chooses among them, e.g. by URL) and override("adapter", double) every
// endpoint of that adapter name, in the routes added after the call. The swap happens once, when
// the route is added (tc.add): the production route is built by the same code, and a route run
// outside a test context has no override to look up, per exchange or otherwise. A double is an
// rc::testing::mock or an rc::spy. A route factory may also take the endpoint as a parameter and
// be given a mock directly: a mock is itself a destination and a request/reply endpoint.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "rc/rc.hpp"

namespace rc::testing {

// ---- test context -------------------------------------------------------------------------------

struct test_options {
  /// The virtual time a run_until helper may move the clock forward by, per call, before it gives up.
  duration limit = std::chrono::hours(1);
  /// How long stop() lets in-flight exchanges finish (virtual time).
  duration shutdown_timeout = std::chrono::seconds(30);
  std::string id = "test";
};

/// A run_until helper gave up: the virtual-time limit passed, or nothing was left to run.
class run_limit_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One context:error, as the test context captured it.
struct captured_error {
  rc::error error;         // the reported error; one without a code is RC9901
  std::string route;       // the route it came from, when it came from one
  nlohmann::json payload;  // the event's details, as emitted
  time_point at;           // virtual time of the event
};

/// How many exchanges have ended, by how they ended.
struct exchange_counts {
  std::size_t completed = 0;
  std::size_t failed = 0;
  std::size_t dropped = 0;
  std::size_t ended() const noexcept { return completed + failed + dropped; }
};

class test_context {
 public:
  explicit test_context(test_options options = {});
  ~test_context();
  test_context(const test_context&) = delete;
  test_context& operator=(const test_context&) = delete;

  rc::context& ctx() noexcept { return ctx_; }

  /// Adds a route, first replacing the endpoints the overrides name.
  route_runtime& add(route_definition def);
  template <class Builder, class = decltype(std::declval<Builder&&>().build())>
  route_runtime& add(Builder&& b) {
    return add(std::forward<Builder>(b).build());
  }

  /// Replaces every endpoint of C++ type Endpoint (e.g. rc::http_client_endpoint) in routes added
  /// from now on; with `pick`, only those for which pick(const Endpoint&) is true.
  template <class Endpoint, class Double>
  test_context& override(const Double& d) {
    return override<Endpoint>(d, [](const Endpoint&) { return true; });
  }
  template <class Endpoint, class Double, class Pick>
  test_context& override(const Double& d, Pick pick) {
    static_assert(std::is_invocable_r_v<bool, Pick&, const Endpoint&>,
                  "override<Endpoint>(double, pick): pick must take const Endpoint& and return bool");
    add_rule(
        [pick = std::move(pick)](const endpoint_step& s, const step&) mutable {
          return s.endpoint_type() == typeid(Endpoint) && pick(*static_cast<const Endpoint*>(s.endpoint()));
        },
        as_double(d));
    return *this;
  }
  /// Replaces every endpoint whose adapter is `adapter` ("http", "log", "direct") in routes added
  /// from now on.
  template <class Double>
  test_context& override(std::string adapter, const Double& d) {
    add_rule([adapter = std::move(adapter)](const endpoint_step&, const step& s) { return s.adapter() == adapter; },
             as_double(d));
    return *this;
  }

  /// Starts the routes and runs what is due at the current time: every source has started.
  void start_and_wait_ready();
  /// Moves virtual time forward by `d`, running everything due on the way.
  void advance(duration d);
  void advance_to(time_point t);
  /// Runs until nothing is ready and nothing is due. run_limit_error past test_options::limit
  /// (an endless source never goes idle: use advance() or run_until_completed() with it).
  void run_until_idle();
  /// Runs until `n` exchanges have ended (completed, failed or dropped) since the context was
  /// made, and stops there. run_limit_error when nothing is left to run first, or past the limit.
  void run_until_completed(std::size_t n);
  /// Waits until every finite source has finished and nothing is in flight (rc::context::drain).
  void drain();
  stop_result stop();
  /// start_and_wait_ready(), drain(), stop().
  stop_result test();

  time_point now() const { return ctx_.now(); }
  exchange_counts exchanges() const;
  /// Every context:error so far, in order.
  std::vector<captured_error> errors() const;

 private:
  using matcher = std::function<bool(const endpoint_step&, const step&)>;
  struct rule {
    matcher match;
    std::shared_ptr<endpoint_double> with;
  };
  struct recorder;

  void add_rule(matcher m, std::shared_ptr<endpoint_double> d);
  void apply(std::unique_ptr<step>& s) const;
  template <class Done>
  void run_until(const char* what, Done done);

  template <class Double>
  static std::shared_ptr<endpoint_double> as_double(const Double& d) {
    if constexpr (requires { d.as_double(); })
      return d.as_double();
    else
      static_assert(sizeof(Double) == 0, "override(): the double must be an rc::testing::mock or an rc::spy");
  }
  template <class T>
  static std::shared_ptr<endpoint_double> as_double(const rc::spy<T>& s);

  test_options options_;
  rc::context ctx_;
  std::vector<rule> rules_;
  std::unique_ptr<recorder> recorder_;
};

// ---- mock ---------------------------------------------------------------------------------------

/// One call a mock received.
struct mock_call {
  std::shared_ptr<const exchange> request;  // a copy of the exchange as it reached the mock
  time_point at;                            // when it reached the mock (virtual time)
  time_point done;                          // when it replied or failed: at + latency
  bool enrich = false;                      // true: asked for a reply (.request); false: .to / .tap
  std::optional<rc::error> failure;         // the error it answered with, if any

  template <class T>
  const T& body() const {
    return request->body<T>();
  }
};

/// The error rc::http raises for a response with this status (throw_on_http_error): RC5001 with
/// details {status, url, method[, retry_after_ms]}, retryable for 5xx and 429.
rc::error http_error(int status, std::string url = "http://mock/", std::string method = "GET",
                     std::optional<duration> retry_after = std::nullopt);

/// Stands in for an endpoint. Replies with Reply values (or fails) in the order set up: the
/// call-numbered and one-off answers first, then the standing one (`reply`/`fail`; a
/// default-constructed Reply when none was given). Each call waits `latency` of virtual time
/// first (cut short, and failed, when the exchange is aborted or its deadline passes) and is
/// recorded. Copies share everything: keep one in the test and give copies to the routes.
template <class Reply>
class mock final : public destination_base {
 public:
  using responder = std::function<Reply(const exchange&)>;

  mock() : state_(std::make_shared<state>()) {}

  std::string_view adapter() const override { return "mock"; }
  bool synchronous() const noexcept override { return false; }
  task<void> send(exchange& ex, route_runtime& rt) override { return state_->send(ex, rt); }
  task<exchange> call(exchange& ex, route_runtime& rt) { return state_->call(ex, rt); }

  /// The standing answer: a value, or a function of the request exchange (which may throw).
  mock& reply(Reply value) { return reply_with(fixed(std::move(value))); }
  template <class F>
  requires std::is_invocable_r_v<Reply, F&, const exchange&> mock& reply(F f) {
    return reply_with(responder(std::move(f)));
  }
  /// The next unanswered call gets this answer (queued in order).
  mock& reply_once(Reply value) { return once(fixed(std::move(value))); }
  /// Every call fails with `e` (rc::error: RC5010 connection failed, http_error(503), ...).
  mock& fail(rc::error e) { return reply_with(failing(std::move(e))); }
  mock& fail_once(rc::error e) { return once(failing(std::move(e))); }
  /// Call number `n` (1-based, counting every call) fails with `e`; the others answer as usual.
  mock& fail_call(std::size_t n, rc::error e) {
    std::lock_guard lock(state_->mutex);
    state_->numbered.emplace_back(n, failing(std::move(e)));
    return *this;
  }
  /// Virtual time each call takes before it answers.
  mock& latency(duration d) {
    std::lock_guard lock(state_->mutex);
    state_->latency = d;
    return *this;
  }

  std::vector<mock_call> calls() const {
    std::lock_guard lock(state_->mutex);
    return state_->calls;
  }
  std::size_t count() const {
    std::lock_guard lock(state_->mutex);
    return state_->calls.size();
  }
  /// The latest call; RC5002 when there was none.
  mock_call last() const {
    std::lock_guard lock(state_->mutex);
    if (state_->calls.empty()) throw rc::error(errc::validation, "mock.last(): the mock has not been called");
    return state_->calls.back();
  }
  /// Calls per role (send: .to/.tap, enrich: .request).
  spy_calls roles() const {
    std::lock_guard lock(state_->mutex);
    spy_calls out;
    for (const auto& c : state_->calls) ++(c.enrich ? out.enrich : out.send);
    return out;
  }
  /// When each call reached the mock, and when each answered (relative to the engine epoch).
  std::vector<duration> call_times() const { return times(&mock_call::at); }
  std::vector<duration> reply_times() const { return times(&mock_call::done); }
  /// Forgets the calls (the answers set up stay).
  void reset() {
    std::lock_guard lock(state_->mutex);
    state_->calls.clear();
  }

  std::shared_ptr<endpoint_double> as_double() const { return state_; }

 private:
  static responder fixed(Reply value) {
    return [value = std::move(value)](const exchange&) { return value; };
  }
  static responder failing(rc::error e) {
    return [e = std::move(e)](const exchange&) -> Reply { throw e; };
  }
  mock& reply_with(responder r) {
    std::lock_guard lock(state_->mutex);
    state_->standing = std::move(r);
    return *this;
  }
  mock& once(responder r) {
    std::lock_guard lock(state_->mutex);
    state_->queued.push_back(std::move(r));
    return *this;
  }
  std::vector<duration> times(time_point mock_call::*field) const {
    std::lock_guard lock(state_->mutex);
    std::vector<duration> out;
    for (const auto& c : state_->calls) out.push_back((c.*field).time_since_epoch());
    return out;
  }

  struct state final : endpoint_double {
    mutable std::mutex mutex;
    std::vector<std::pair<std::size_t, responder>> numbered;
    std::deque<responder> queued;
    responder standing;
    duration latency{};
    std::vector<mock_call> calls;

    task<void> send(exchange& ex, route_runtime& rt) override { (void)co_await respond(ex, rt, false); }
    task<exchange> call(exchange& ex, route_runtime& rt) override { return respond(ex, rt, true); }

    task<exchange> respond(exchange& ex, route_runtime& rt, bool enrich) {
      const time_point at = rt.now();
      std::size_t index;
      responder answer;
      duration wait;
      {
        std::lock_guard lock(mutex);
        index = calls.size();
        calls.push_back(mock_call{std::make_shared<const exchange>(ex.clone()), at, at, enrich, std::nullopt});
        answer = pick(index + 1);
        wait = latency;
      }
      try {
        if (wait > duration::zero() &&
            co_await rt.clock().wait_until(at + wait, ex.abort_signal()) == wait_result::cancelled) {
          if (ex.abort_signal()->deadline_passed())
            throw rc::error(errc::timed_out, "mock: call abandoned, the exchange's deadline passed", false);
          throw rc::error(errc::step_failed, "mock: call abandoned, the caller went away", false);
        }
        exchange reply;
        reply.set_body(answer(ex));
        finish(index, rt.now(), nullptr);
        co_return reply;
      } catch (...) {
        finish(index, rt.now(), std::current_exception());
        throw;
      }
    }

    responder pick(std::size_t call_number) {
      for (auto it = numbered.begin(); it != numbered.end(); ++it)
        if (it->first == call_number) {
          responder r = std::move(it->second);
          numbered.erase(it);
          return r;
        }
      if (!queued.empty()) {
        responder r = std::move(queued.front());
        queued.pop_front();
        return r;
      }
      if (standing) return standing;
      if constexpr (std::is_default_constructible_v<Reply>)
        return [](const exchange&) { return Reply{}; };
      else
        return [](const exchange&) -> Reply {
          throw rc::error(errc::misconfigured, "mock: no reply set up (use reply(...) or fail(...))");
        };
    }

    void finish(std::size_t index, time_point done, std::exception_ptr e) {
      std::lock_guard lock(mutex);
      if (index >= calls.size()) return;  // reset() meanwhile
      calls[index].done = done;
      if (e) calls[index].failure = to_error(e);
    }
  };

  std::shared_ptr<state> state_;
};

// ---- spy as a double -----------------------------------------------------------------------------

namespace detail {
/// An rc::spy standing in for an endpoint: records, and replies with the body unchanged.
template <class T>
class spy_double final : public endpoint_double {
 public:
  explicit spy_double(rc::spy<T> s) : spy_(std::move(s)) {}
  task<void> send(exchange& ex, route_runtime& rt) override {
    spy_.send_now(ex, rt);
    co_return;
  }
  task<exchange> call(exchange& ex, route_runtime& rt) override { return spy_.call(ex, rt); }

 private:
  rc::spy<T> spy_;
};
}  // namespace detail

template <class T>
std::shared_ptr<endpoint_double> test_context::as_double(const rc::spy<T>& s) {
  return std::make_shared<detail::spy_double<T>>(s);
}

}  // namespace rc::testing
