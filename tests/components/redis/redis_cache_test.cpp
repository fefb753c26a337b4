// rc::redis_cache against a real redis-server: hits and misses shared through the server, TTLs
// kept by the server (PX), and a server that is gone.
#include <atomic>
#include <catch2/catch.hpp>
#include <mutex>
#include <rc/rc.hpp>
#include <rc/redis_cache.hpp>
#include <thread>
#include <vector>

#include "components/redis/sync_redis.hpp"
#include "support/dsl_support.hpp"
#include "support/redis_server.hpp"

namespace redis_cache_test {

using namespace std::chrono_literals;

namespace {

/// A route that runs `values` one after the other through a cached step counting its calls.
struct cached_run {
  std::atomic<int> calls{0};
  std::mutex mutex;
  std::vector<int> out;

  void run(std::uint16_t port, std::vector<int> values, rc::cache_options o, rc::redis_cache_options ro) {
    rc::context ctx;
    rc::redis_connection conn(ctx, {.port = port});
    o.provider = rc::redis_cache<int>(conn, std::move(ro));
    ctx.add(rc::craft()
                .id("cached")
                .from(rc::sequence(std::move(values)))
                .cache(std::move(o))
                .transform([this](int v) {
                  ++calls;
                  return v * 10;
                })
                .to([this](int v) {
                  std::lock_guard lock(mutex);
                  out.push_back(v);
                }));
    ctx.start();
    ctx.drain();
    ctx.stop();
  }
};

}  // namespace

TEST_CASE("redis_cache: a miss runs the step and stores the JSON with PX, a hit restores it", "[redis]") {
  rc::test::redis_server server;
  rc::test::sync_redis redis(server.port());
  cached_run r;
  r.run(server.port(), {1, 2, 1, 2, 3}, {.ttl = 5s}, {.prefix = "t:"});
  CHECK(r.calls == 3);
  CHECK(r.out == std::vector<int>{10, 20, 10, 20, 30});
  CHECK(redis.cmd({"GET", "t:1"}).str == "10");
  const long long pttl = redis.integer({"PTTL", "t:1"});
  CHECK(pttl > 4000);
  CHECK(pttl <= 5000);

  // A second instance (a fresh context and connection) shares the entries: all hits.
  cached_run again;
  again.run(server.port(), {1, 2, 3}, {.ttl = 5s}, {.prefix = "t:"});
  CHECK(again.calls == 0);
  CHECK(again.out == std::vector<int>{10, 20, 30});

  // No ttl: no expiry on the server.
  cached_run forever;
  forever.run(server.port(), {7}, {}, {.prefix = "f:"});
  CHECK(redis.integer({"PTTL", "f:7"}) == -1);
}

TEST_CASE("redis_cache: an entry expires on the server after its ttl and the next exchange misses", "[redis]") {
  rc::test::redis_server server;
  rc::test::sync_redis redis(server.port());
  cached_run first;
  // 300 ms: the run's end, its context's teardown and a round trip all come before the PTTL,
  // and a loaded sanitizer build can take tens of ms over them.
  first.run(server.port(), {1}, {.ttl = 300ms}, {.prefix = "e:"});
  CHECK(first.calls == 1);
  const long long pttl = redis.integer({"PTTL", "e:1"});
  CHECK(pttl > 0);
  CHECK(pttl <= 300);
  std::this_thread::sleep_for(350ms);
  CHECK(redis.integer({"EXISTS", "e:1"}) == 0);
  cached_run second;
  second.run(server.port(), {1}, {.ttl = 300ms}, {.prefix = "e:"});
  CHECK(second.calls == 1);
}

TEST_CASE("redis_cache: a custom serialiser stores its own text", "[redis]") {
  rc::test::redis_server server;
  rc::test::sync_redis redis(server.port());
  cached_run r;
  r.run(server.port(), {4, 4}, {.ttl = 5s},
        {.prefix = "s:",
         .serialise = [](const rc::any_body& b) { return "n=" + std::to_string(b.get<int>()); },
         .deserialise = [](const std::string& t) { return rc::any_body(std::stoi(t.substr(2))); }});
  CHECK(r.calls == 1);
  CHECK(r.out == std::vector<int>{40, 40});
  CHECK(redis.cmd({"GET", "s:4"}).str == "n=40");
}

TEST_CASE("redis_cache: Redis down reports cache:failed, the route still runs with bypass, fails RC5028 without",
          "[redis]") {
  rc::test::redis_server server;
  const auto port = server.port();
  server.kill();

  std::vector<std::string> ops;
  {
    rc::context ctx;
    rc::test::event_recorder events(ctx);
    rc::redis_connection conn(ctx, {.port = port, .command_timeout = 200ms});
    std::atomic<int> calls{0};
    ctx.add(rc::craft()
                .id("bypass")
                .from(rc::sequence(std::vector<int>{1, 1}))
                .cache({.ttl = 5s,
                        .provider = rc::redis_cache<int>(conn),
                        .on_provider_error = rc::cache_provider_error::bypass})
                .transform([&](int v) {
                  ++calls;
                  return v;
                }));
    ctx.add(rc::craft()
                .id("fail")
                .from(rc::sequence(std::vector<int>{1}))
                .cache({.ttl = 5s, .provider = rc::redis_cache<int>(conn)})
                .transform([&](int v) {
                  ++calls;
                  return v;
                }));
    ctx.start();
    ctx.drain();
    ctx.stop();
    CHECK(calls == 2);  // both bypass exchanges ran, the failing route's did not
    const auto completed = events.named("route:exchange:completed");
    CHECK(completed.size() == 2);
    for (const auto& e : completed) CHECK(e.details["routeId"] == "bypass");
    const auto failed = events.named("route:exchange:failed");
    REQUIRE(failed.size() == 1);
    CHECK(failed[0].details["routeId"] == "fail");
    CHECK(failed[0].details["error"]["code"] == "RC5028");
    for (const auto& e : events.named("route:cache:failed")) ops.push_back(e.details["operation"]);
  }
  CHECK(ops == std::vector<std::string>{"get", "get", "get"});
}

}  // namespace redis_cache_test
