// cache through the DSL, both scopes, in virtual time.
#include <catch2/catch.hpp>
#include <map>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>

#include "support/dsl_support.hpp"

namespace cache_test {

using namespace std::chrono_literals;
using rc::test::arrivals;
using rc::test::event_recorder;
using rc::test::rc_error;

namespace {

std::string error_code(const rc::test::recorded_event& e) { return e.details["error"]["code"].get<std::string>(); }

/// The same key for every exchange.
std::string one_key(const rc::exchange&) { return "k"; }

/// A provider whose get or put throws, for the failure paths.
class broken_provider final : public rc::cache_provider {
 public:
  broken_provider(bool get_fails, bool put_fails) : get_fails_(get_fails), put_fails_(put_fails) {}
  rc::task<std::optional<rc::any_body>> get(const std::string&, const rc::scheduler&) override {
    if (get_fails_) throw std::runtime_error("redis down");
    co_return std::nullopt;
  }
  rc::task<void> put(const std::string&, const rc::any_body&, std::optional<rc::duration>,
                     const rc::scheduler&) override {
    if (put_fails_) throw std::runtime_error("redis full");
    co_return;
  }

 private:
  bool get_fails_, put_fails_;
};

/// An asynchronous step that takes `d` of engine time and does not end early on shutdown.
class unstoppable_step final : public rc::step {
 public:
  unstoppable_step(rc::duration d, int* calls) : d_(d), calls_(calls) {}
  std::string_view operation() const override { return "slow"; }
  rc::task<rc::outcome> run(rc::exchange&, rc::route_runtime& rt) override {
    co_await rt.clock().wait_until(rt.now() + d_);
    ++*calls_;
    co_return rc::outcome::proceed();
  }

 private:
  rc::duration d_;
  int* calls_;
};

}  // namespace

TEST_CASE("cache, step scope: a miss runs the step and stores, a hit restores the body without running it") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  event_recorder events(ctx);
  int calls = 0;
  ctx.add(rc::craft()
              .id("r")
              .from(rc::sequence(std::vector<int>{7, 7, 8}))
              .cache({.label = "price"})
              .transform([&](int v) {
                ++calls;
                return "price of " + std::to_string(v);
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(calls == 2);
  CHECK(out.bodies() == std::vector<std::string>{"price of 7", "price of 7", "price of 8"});
  CHECK(events.names("route:cache:") == std::vector<std::string>{"route:cache:miss", "route:cache:stored",
                                                                 "route:cache:hit", "route:cache:miss",
                                                                 "route:cache:stored"});
  const auto hit = events.named("route:cache:hit")[0].details;
  CHECK(hit["key"] == "7");  // default key: the body's JSON
  CHECK(hit["label"] == "price");
  CHECK(hit["scope"] == "step");
  CHECK(hit["stepLabel"] == "transform");
  CHECK(events.count("route:exchange:restored") == 0);  // route scope only
}

TEST_CASE("cache: entries expire after ttl of engine time") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  int calls = 0;
  ctx.add(
      rc::craft().id("r").from(arrivals({0s, 5s, 11s, 12s})).cache({.key = one_key, .ttl = 10s}).transform([&](int v) {
        ++calls;
        return v;
      }));
  ctx.start();
  ctx.drain();
  CHECK(calls == 2);  // 0 stores, 5s hits, 11s finds it expired and stores again, 12s hits
  CHECK(events.count("route:cache:hit") == 2);
  CHECK(events.named("route:cache:stored")[0].details["ttlMs"] == 10000);
}

TEST_CASE("cache: the memory provider keeps max_entries, least recently used out first") {
  rc::context ctx(rc::virtual_time);
  std::vector<int> calls;
  ctx.add(rc::craft()
              .id("r")
              .from(rc::sequence(std::vector<int>{1, 2, 1, 3, 2, 1}))
              .cache({.max_entries = 2})
              .transform([&](int v) {
                calls.push_back(v);
                return v;
              }));
  ctx.start();
  ctx.drain();
  // 1, 2 stored; 1 hits (now the most recent); 3 evicts 2; 2 misses and evicts 1; 1 misses.
  CHECK(calls == std::vector<int>{1, 2, 3, 2, 1});
}

TEST_CASE("cache: failures are never cached") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  int calls = 0;
  ctx.add(
      rc::craft().id("r").from(rc::sequence(std::vector<int>{1, 1, 1})).cache({.key = one_key}).transform([&](int v) {
        if (++calls == 1) throw std::runtime_error("flaky");
        return v;
      }));
  ctx.start();
  ctx.drain();
  CHECK(calls == 2);
  CHECK(events.count("route:cache:stored") == 1);
  CHECK(events.count("route:cache:hit") == 1);
  CHECK(events.count("route:exchange:failed") == 1);
}

TEST_CASE("cache: a throwing key fails with RC5029 (not retryable), a body without JSON needs a key") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  struct opaque {
    int v;
  };
  ctx.add(rc::craft()
              .id("throws")
              .from(rc::simple(1))
              .cache({.key = [](const rc::exchange&) -> std::string { throw std::runtime_error("no key"); }})
              .transform([](int v) { return v; }));
  ctx.add(rc::craft().id("opaque").from(rc::simple(opaque{1})).cache().transform([](opaque o) { return o.v; }));
  ctx.start();
  ctx.drain();
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 2);
  for (const auto& f : failed) {
    CHECK(error_code(f) == "RC5029");
    CHECK(f.details["error"]["retryable"] == false);
  }
}

TEST_CASE("cache: a provider failure on get is RC5028 (retryable), on put it never fails the exchange") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  int calls = 0;
  auto step = [&](int v) {
    ++calls;
    return v;
  };
  ctx.add(rc::craft()
              .id("get")
              .from(rc::simple(1))
              .cache({.key = one_key, .provider = std::make_shared<broken_provider>(true, false)})
              .transform(step));
  ctx.add(rc::craft()
              .id("put")
              .from(rc::simple(1))
              .cache({.key = one_key, .provider = std::make_shared<broken_provider>(false, true)})
              .transform(step));
  ctx.start();
  ctx.drain();
  CHECK(calls == 1);  // only the put route ran the step
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].details["routeId"] == "get");
  CHECK(error_code(failed[0]) == "RC5028");
  CHECK(failed[0].details["error"]["retryable"] == true);
  std::map<std::string, std::string> ops;
  for (const auto& e : events.named("route:cache:failed")) ops[e.details["routeId"]] = e.details["operation"];
  CHECK(ops == std::map<std::string, std::string>{{"get", "get"}, {"put", "put"}});
  CHECK(events.count("route:exchange:completed") == 1);
  CHECK(events.count("route:cache:stored") == 0);
}

TEST_CASE("cache: a body that cannot be copied is not stored (cache:failed RC5003), the exchange completes") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  ctx.add(rc::craft()
              .id("r")
              .from(rc::simple(1))
              .cache({.key = one_key})
              .transform([](int v) { return std::make_unique<int>(v); })
              .process([](rc::exchange&) {}));
  ctx.start();
  ctx.drain();
  const auto failed = events.named("route:cache:failed");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].details["error"]["code"] == "RC5003");
  CHECK(events.count("route:exchange:completed") == 1);
}

// ---- stampede ---------------------------------------------------------------------------------

TEST_CASE("cache: concurrent misses on one key run the step once, the waiters report hits") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  int calls = 0;
  ctx.add(rc::craft()
              .id("r")
              .from(arrivals({0ms, 1ms, 2ms}))
              .cache({.key = one_key})
              .delay(10ms)
              .transform([&](int v) {
                ++calls;
                return v + 100;
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(calls == 1);
  CHECK(out.bodies() == std::vector<int>{100, 100, 100});
  CHECK(out.times() == std::vector<rc::duration>{10ms, 10ms, 10ms});
  CHECK(events.count("route:cache:miss") == 1);
  CHECK(events.count("route:cache:hit") == 2);
}

TEST_CASE("cache: when the leader fails, one waiter leads next and the others wait for it") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  int calls = 0;
  ctx.add(rc::craft()
              .id("r")
              .from(arrivals({0ms, 1ms, 2ms}))
              .cache({.key = one_key})
              .delay(10ms)
              .transform([&](int v) {
                if (++calls == 1) throw std::runtime_error("leader failed");
                return v;
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(calls == 2);
  CHECK(out.count() == 2);
  CHECK(events.count("route:exchange:failed") == 1);
  CHECK(events.count("route:cache:miss") == 2);
  CHECK(events.count("route:cache:hit") == 1);
}

TEST_CASE("cache: on shutdown a waiting miss runs the step itself") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  int calls = 0;
  ctx.add(rc::craft()
              .id("r")
              .from(arrivals({0ms, 1ms}))
              .cache({.key = one_key})
              .use(std::make_unique<unstoppable_step>(1s, &calls))
              .to(out));
  ctx.start();
  ctx.advance(5ms);  // the leader is in its 1s step, the second miss waits for it
  ctx.stop();        // the waiter does not wait for a leader that may be winding down
  CHECK(calls == 2);
  CHECK(out.times() == std::vector<rc::duration>{1000ms, 1005ms});
}

/// Starts body 0 at once, then body 1 carrying `abort` as its abort signal (a client that may
/// go away).
class abortable_pair final : public rc::source<int> {
 public:
  explicit abortable_pair(rc::cancel_signal* abort) : abort_(abort) {}
  std::string_view adapter() const override { return "pair"; }
  rc::task<void> run(rc::source_context& sc) override {
    sc.spawn(sc.make(0));
    auto ex = sc.make(1);
    ex.set_abort_signal(abort_);
    sc.spawn(std::move(ex));
    co_return;
  }

 private:
  rc::cancel_signal* abort_;
};

TEST_CASE("cache: a waiting miss whose client goes away stops waiting and drops with client-gone") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  rc::cancel_signal client_gone(ctx.clock());
  int calls = 0;
  ctx.add(rc::craft()
              .id("r")
              .from(abortable_pair(&client_gone))
              .cache({.key = one_key})
              .delay(10ms)
              .transform([&](int v) {
                ++calls;
                return v;
              })
              .to(out));
  ctx.start();
  ctx.advance(3ms);
  client_gone.fire();
  ctx.advance(1ms);
  const auto dropped = events.named("route:exchange:dropped");
  REQUIRE(dropped.size() == 1);  // at once, not when the leader finishes
  CHECK(dropped[0].details["reason"] == "client-gone");
  ctx.drain();
  CHECK(calls == 1);
  CHECK(out.bodies() == std::vector<int>{0});
  CHECK(events.count("route:cache:hit") == 0);
}

// ---- route scope ------------------------------------------------------------------------------

TEST_CASE("cache, route scope: the pipeline's final body is cached, a hit emits exchange:restored") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  event_recorder events(ctx);
  int calls = 0;
  ctx.add(rc::craft()
              .id("r")
              .cache({.key = one_key})
              .from(rc::sequence(std::vector<int>{1, 2}))
              .transform([&](int v) {
                ++calls;
                return v * 10;
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(calls == 1);
  CHECK(out.count() == 1);  // a hit skips the pipeline
  const auto restored = events.named("route:exchange:restored");
  REQUIRE(restored.size() == 1);
  CHECK(restored[0].details["source"] == "cache");
  CHECK(restored[0].details.contains("exchangeId"));
  const auto completed = events.named("route:exchange:completed");
  REQUIRE(completed.size() == 2);
  CHECK(completed[1].details["exchange"]["body"] == 10);
  CHECK(events.named("route:cache:hit")[0].details["scope"] == "route");
}

TEST_CASE("cache, route scope: a cache hit bypasses the breaker and retry") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  int calls = 0;
  ctx.add(rc::craft()
              .id("r")
              .circuit_breaker({.failure_threshold = 1})
              .retry({.max_attempts = 3, .backoff = 1ms})
              .cache({.key = one_key})
              .from(rc::sequence(std::vector<int>{1, 1, 1}))
              .transform([&](int v) {
                if (++calls < 3) throw std::runtime_error("cold");
                return v;
              }));
  ctx.start();
  ctx.drain();
  CHECK(calls == 3);  // the first exchange's three attempts; the others hit
  CHECK(events.count("route:cache:hit") == 2);
  CHECK(events.count("route:retry:attempt") == 2);  // all from the first exchange
  CHECK(events.count("route:circuitBreaker:opened") == 0);
  CHECK(events.count("route:exchange:completed") == 3);
}

// ---- options ------------------------------------------------------------------------------------

TEST_CASE("cache: each bad option is RC5003 at the call, naming the option and the value") {
  CHECK_THROWS_MATCHES(rc::craft().cache({.ttl = 0ms}), rc::error,
                       rc_error(rc::errc::misconfigured, "cache({ ttl }) must be a duration >= 1ms, got 0ms"));
  CHECK_THROWS_MATCHES(
      rc::craft().from(rc::simple(1)).cache({.max_entries = 0}), rc::error,
      rc_error(rc::errc::misconfigured, "cache({ max_entries }) must be an integer in [1, 10000000], got 0"));
}

TEST_CASE("cache: with on_provider_error bypass a failing get runs the step uncached, reported as cache:failed") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  int calls = 0;
  auto step = [&](int v) {
    ++calls;
    return v + 1;
  };
  ctx.add(rc::craft()
              .id("bypass")
              .from(rc::simple(std::vector<int>{1, 1}))
              .cache({.key = one_key,
                      .provider = std::make_shared<broken_provider>(true, false),
                      .on_provider_error = rc::cache_provider_error::bypass})
              .transform(step));
  ctx.start();
  ctx.drain();
  CHECK(calls == 2);  // no cache: each exchange runs the step
  CHECK(events.count("route:exchange:completed") == 2);
  CHECK(events.count("route:exchange:failed") == 0);
  const auto failed = events.named("route:cache:failed");
  REQUIRE(failed.size() == 2);
  CHECK(failed[0].details["operation"] == "get");
  CHECK(events.count("route:cache:stored") == 0);  // nothing stored while the store is away
}

}  // namespace cache_test
