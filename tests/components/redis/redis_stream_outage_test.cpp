// rc::redis_stream against a real redis-server: the consumer-group source across a server killed
// mid-run and restarted (it backs off, recovers by itself, loses no entry), and the destination's
// `fields` option (the entry's fields are exactly the caller's, the exchange is unchanged, and
// the source reads them back as headers).
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <rc/rc.hpp>
#include <rc/redis_stream.hpp>
#include <string>
#include <thread>
#include <vector>

#include "components/redis/sync_redis.hpp"
#include "support/dsl_support.hpp"
#include "support/eventually.hpp"
#include "support/redis_server.hpp"

namespace redis_stream_outage_test {

using namespace std::chrono_literals;
namespace hdr = rc::redis_stream_headers;
using steady = std::chrono::steady_clock;

namespace {

/// The fields of an entry reply [id, [f, v, ...]], in order.
std::vector<std::pair<std::string, std::string>> fields_of(const rc::redis_reply& entry) {
  std::vector<std::pair<std::string, std::string>> out;
  const auto& kv = entry.elements.at(1).elements;
  for (std::size_t i = 0; i + 1 < kv.size(); i += 2) out.emplace_back(kv[i].str, kv[i + 1].str);
  return out;
}

/// Polls `f` (really, every 5 ms) until it holds or `limit` passes.
template <class F>
bool eventually(std::chrono::milliseconds limit, F&& f) {
  return rc::test::eventually(limit, std::forward<F>(f), 5ms);
}

}  // namespace

TEST_CASE("redis_stream: the source rides out a killed and restarted server, backing off, losing no entry", "[redis]") {
  // The server keeps its data across the kill (AOF, written before each reply), as a production
  // server would; what the source must survive is the connection and its commands failing.
  rc::test::redis_server server({"--appendonly", "yes", "--appendfsync", "always"});
  constexpr int first = 300, later = 50;
  {
    rc::test::sync_redis redis(server.port());
    redis.cmd({"EVAL", "for i = 0, tonumber(ARGV[1]) - 1 do redis.call('XADD', KEYS[1], '*', 'body', i) end", "1",
               "jobs", std::to_string(first)});
  }
  std::mutex mutex;
  std::map<std::string, int> runs;                                      // body -> times run
  std::vector<std::pair<steady::time_point, std::string>> loop_errors;  // the read loop's, not the runs'
  std::atomic<int> processed{0};

  rc::context ctx;
  rc::redis_connection conn(ctx, {.port = server.port(), .reconnect_min = 10ms, .reconnect_max = 100ms});
  auto source = rc::redis_stream(conn, "jobs",
                                 {.group = "workers",
                                  .max_in_flight = 4,
                                  .block = 50ms,
                                  // Entries whose ack was lost in the outage are claimed back soon.
                                  .min_idle = 300ms,
                                  .claim_interval = 100ms});
  auto stats = source.probe();
  auto sub = ctx.on("plugin:redis:stream:error", [&](const rc::event& e) {
    const std::string op = e.details.value("operation", "");
    if (op == "process") return;
    std::lock_guard lock(mutex);
    loop_errors.emplace_back(steady::now(), op);
  });
  ctx.add(rc::craft().id("work").from(std::move(source)).process([&](rc::exchange& ex) {
    {
      std::lock_guard lock(mutex);
      ++runs[ex.body<std::string>()];
    }
    processed.fetch_add(1);
    std::this_thread::sleep_for(1ms);
  }));
  auto distinct = [&] {
    std::lock_guard lock(mutex);
    return runs.size();
  };

  rc::test::within(60s, [&] {
    ctx.start();
    REQUIRE(eventually(10s, [&] { return processed.load() >= 100; }));
    server.kill();
    const auto killed = steady::now();
    std::this_thread::sleep_for(1000ms);
    const auto restarted_at = steady::now();
    server.restart();
    {
      // Work added after the restart is read too.
      rc::test::sync_redis redis(server.port());
      REQUIRE(redis.integer({"XLEN", "jobs"}) == first);  // the server kept the stream and its group
      redis.cmd({"EVAL", "for i = 0, tonumber(ARGV[1]) - 1 do redis.call('XADD', KEYS[1], '*', 'body', 1000 + i) end",
                 "1", "jobs", std::to_string(later)});
      // Every entry run and acknowledged: none lost, none left pending.
      CHECK(eventually(20s, [&] {
        return distinct() == static_cast<std::size_t>(first + later) &&
               redis.cmd({"XPENDING", "jobs", "workers"}).elements.at(0).integer == 0;
      }));
    }
    ctx.stop();

    std::lock_guard lock(mutex);
    INFO("loop errors " << loop_errors.size() << ", distinct " << runs.size());
    for (int i = 0; i < first; ++i) CHECK(runs.count(std::to_string(i)) == 1);
    for (int i = 0; i < later; ++i) CHECK(runs.count(std::to_string(1000 + i)) == 1);
    // At least once: only entries whose run finished as the server died (their ack lost) run again.
    int again = 0;
    for (const auto& [body, n] : runs) again += n - 1;
    CHECK(again <= 4);
    // Acknowledged once each (an XACK the server ran just as it died, its reply lost, is not counted).
    CHECK(stats().acked <= static_cast<std::uint64_t>(first + later));
    CHECK(stats().acked + 4 >= static_cast<std::uint64_t>(first + later));
    // Backing off, not spinning: the read loop's failures during the second the server was
    // gone are a handful, spaced from 50 ms up, doubling.
    std::vector<steady::time_point> during;
    for (const auto& e : loop_errors)
      if (e.first >= killed && e.first < restarted_at) during.push_back(e.first);
    CHECK(during.size() >= 2);
    CHECK(during.size() <= 8);
    for (std::size_t i = 1; i < during.size(); ++i) CHECK(during[i] - during[i - 1] >= 45ms);
    if (during.size() >= 3) CHECK(during.back() - during[during.size() - 2] >= 180ms);
  });
}

TEST_CASE("redis_stream: the destination's fields option writes exactly the fields given, in order", "[redis]") {
  rc::test::redis_server server;
  rc::test::sync_redis redis(server.port());
  rc::spy<std::string> after;
  {
    rc::context ctx;
    rc::redis_connection conn(ctx, {.port = server.port()});
    ctx.add(rc::craft()
                .id("write")
                .from(rc::sequence(std::vector<std::string>{"a", "b", ""}))
                .header("tenant", "acme")
                .to(rc::redis_stream(conn, "orders",
                                     {.max_len = 100,
                                      .fields =
                                          [](const rc::exchange& ex) {
                                            const auto body = ex.body<std::string>();
                                            if (body.empty()) return rc::redis_fields{};  // no field at all
                                            return rc::redis_fields{{"sku", "sku-" + body},
                                                                    {"tenant", ex.header_or("tenant", "")},
                                                                    {"body", body + body}};
                                          }}))
                .to(after));
    ctx.start();
    ctx.drain();
    ctx.stop();
  }
  // The exchange goes on unchanged.
  CHECK(after.bodies() == std::vector<std::string>{"a", "b", ""});
  const auto entries = redis.cmd({"XRANGE", "orders", "-", "+"}).elements;
  REQUIRE(entries.size() == 3);
  using kv = std::vector<std::pair<std::string, std::string>>;
  // Neither the body nor the headers are written on their own: the fields replace both.
  CHECK(fields_of(entries[0]) == kv{{"sku", "sku-a"}, {"tenant", "acme"}, {"body", "aa"}});
  CHECK(fields_of(entries[1]) == kv{{"sku", "sku-b"}, {"tenant", "acme"}, {"body", "bb"}});
  // XADD needs a field: an empty list writes an entry with an empty body.
  CHECK(fields_of(entries[2]) == kv{{"body", ""}});

  // Read back: `body` is the body, every other field a routecraft.redis.field.<name> header.
  std::mutex mutex;
  std::vector<std::pair<std::string, nlohmann::json>> read;
  {
    rc::context ctx;
    rc::redis_connection conn(ctx, {.port = server.port()});
    ctx.add(rc::craft()
                .id("read")
                .from(rc::redis_stream(conn, "orders", {.group = "g", .block = 50ms, .stop_when_empty = true}))
                .process([&](rc::exchange& ex) {
                  std::lock_guard lock(mutex);
                  read.emplace_back(ex.body<std::string>(), ex.headers().to_json());
                }));
    rc::test::within(20s, [&] {
      ctx.start();
      ctx.drain();
      ctx.stop();
    });
  }
  REQUIRE(read.size() == 3);
  std::sort(read.begin(), read.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  CHECK(read[0].first.empty());
  CHECK(read[1].first == "aa");
  CHECK(read[1].second[std::string(hdr::field_prefix) + "sku"] == "sku-a");
  CHECK(read[1].second[std::string(hdr::field_prefix) + "tenant"] == "acme");
  CHECK_FALSE(read[1].second.contains("tenant"));  // a field, not the writer's header
  CHECK(read[2].first == "bb");
  CHECK(read[2].second[std::string(hdr::field_prefix) + "sku"] == "sku-b");
}

}  // namespace redis_stream_outage_test
