// rc::redis_stream against a real redis-server: the destination's fields, the consumer group
// source's acknowledgement, retries and dead letters, its read-ahead bound, and three consumers
// sharing 10,000 entries while one of them (a child process) is killed mid-batch.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <numeric>
#include <rc/rc.hpp>
#include <rc/redis_stream.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "components/redis/sync_redis.hpp"
#include "support/dsl_support.hpp"
#include "support/redis_server.hpp"

namespace redis_stream_test {

using namespace std::chrono_literals;
namespace hdr = rc::redis_stream_headers;

namespace {

/// Field `name` of an entry reply [id, [f, v, ...]].
std::string field(const rc::redis_reply& entry, std::string_view name) {
  const auto& kv = entry.elements.at(1).elements;
  for (std::size_t i = 0; i + 1 < kv.size(); i += 2)
    if (kv[i].str == name) return kv[i + 1].str;
  return "<none>";
}

/// Pending entries of the group (XPENDING summary).
long long pending(rc::test::sync_redis& redis, const std::string& stream, const std::string& group) {
  return redis.cmd({"XPENDING", stream, group}).elements.at(0).integer;
}

/// `n` entries with bodies "0".."n-1", added in one script; returns their ids in order.
std::vector<std::string> seed(rc::test::sync_redis& redis, const std::string& stream, int n) {
  redis.cmd({"EVAL", "for i = 0, tonumber(ARGV[1]) - 1 do redis.call('XADD', KEYS[1], '*', 'body', i) end", "1", stream,
             std::to_string(n)});
  std::vector<std::string> ids;
  for (const auto& e : redis.cmd({"XRANGE", stream, "-", "+"}).elements) ids.push_back(e.elements.at(0).str);
  return ids;
}

/// The entry id each recorded run wrote to the `out` stream, in order.
std::vector<std::string> recorded(rc::test::sync_redis& redis, const std::string& out) {
  std::vector<std::string> ids;
  for (const auto& e : redis.cmd({"XRANGE", out, "-", "+"}).elements) ids.push_back(field(e, "id"));
  return ids;
}

/// The destination that records a processed entry: its id and the consumer that ran it.
rc::redis_stream_endpoint recorder(rc::redis_connection& conn, const std::string& out, std::string consumer) {
  return rc::redis_stream(conn, out, {.fields = [consumer](const rc::exchange& ex) {
                            return rc::redis_fields{{"id", ex.header_or(hdr::entry_id, "")}, {"by", consumer}};
                          }});
}

}  // namespace

TEST_CASE("redis_stream: the destination writes body and headers, the source reads them back and acks", "[redis]") {
  rc::test::redis_server server;
  rc::test::sync_redis redis(server.port());
  {
    rc::context ctx;
    rc::redis_connection conn(ctx, {.port = server.port()});
    ctx.add(rc::craft()
                .id("write")
                .from(rc::sequence(std::vector<std::string>{"a", "b", "c"}))
                .header("tenant", "acme")
                .to(rc::redis_stream(conn, "orders")));
    ctx.add(rc::craft()
                .id("json")
                .from(rc::sequence(std::vector<int>{42}))
                .to(rc::redis_stream(conn, "numbers", {.headers = false})));
    ctx.start();
    ctx.drain();
    ctx.stop();
  }
  const auto entries = redis.cmd({"XRANGE", "orders", "-", "+"}).elements;
  REQUIRE(entries.size() == 3);
  CHECK(field(entries[0], "body") == "a");
  CHECK(nlohmann::json::parse(field(entries[0], "headers")) == nlohmann::json{{"tenant", "acme"}});
  const auto numbers = redis.cmd({"XRANGE", "numbers", "-", "+"}).elements;
  REQUIRE(numbers.size() == 1);
  CHECK(field(numbers[0], "body") == "42");  // a non-string body: its JSON text
  CHECK(field(numbers[0], "headers") == "<none>");

  std::mutex mutex;
  std::vector<std::string> bodies;
  std::vector<nlohmann::json> headers;
  {
    rc::context ctx;
    rc::redis_connection conn(ctx, {.port = server.port()});
    ctx.add(rc::craft()
                .id("read")
                .from(rc::redis_stream(conn, "orders", {.group = "billing", .block = 50ms, .stop_when_empty = true}))
                .process([&](rc::exchange& ex) {
                  std::lock_guard lock(mutex);
                  bodies.push_back(ex.body<std::string>());
                  headers.push_back(ex.headers().to_json());
                }));
    rc::test::within(20s, [&] {
      ctx.start();
      ctx.drain();
      ctx.stop();
    });
  }
  std::sort(bodies.begin(), bodies.end());
  CHECK(bodies == std::vector<std::string>{"a", "b", "c"});
  REQUIRE(headers.size() == 3);
  for (const auto& h : headers) {
    CHECK(h["tenant"] == "acme");
    CHECK(h[std::string(hdr::stream)] == "orders");
    CHECK(h[std::string(hdr::delivery_count)] == 1);
    CHECK(h[std::string(hdr::entry_id)].get<std::string>().find('-') != std::string::npos);
  }
  CHECK(pending(redis, "orders", "billing") == 0);  // every entry acknowledged
}

TEST_CASE("redis_stream: MAXLEN ~ trims the stream as entries are added", "[redis]") {
  rc::test::redis_server server;
  rc::test::sync_redis redis(server.port());
  std::vector<int> values(1000);
  std::iota(values.begin(), values.end(), 0);
  rc::context ctx;
  rc::redis_connection conn(ctx, {.port = server.port()});
  ctx.add(rc::craft().id("trim").from(rc::sequence(values)).to(rc::redis_stream(conn, "capped", {.max_len = 10})));
  ctx.start();
  ctx.drain();
  ctx.stop();
  const long long len = redis.integer({"XLEN", "capped"});
  CHECK(len >= 10);
  CHECK(len < 1000);
  // The newest entry is kept.
  const auto last = redis.cmd({"XREVRANGE", "capped", "+", "-", "COUNT", "1"}).elements;
  REQUIRE(last.size() == 1);
  CHECK(field(last[0], "body") == "999");
}

TEST_CASE("redis_stream: a failing entry is retried and after max_deliveries moved to the dead-letter stream",
          "[redis]") {
  rc::test::redis_server server;
  rc::test::sync_redis redis(server.port());
  redis.cmd({"XADD", "jobs", "*", "body", "ok-1"});
  redis.cmd({"XADD", "jobs", "*", "body", "poison-1", "tenant", "acme"});
  redis.cmd({"XADD", "jobs", "*", "body", "ok-2"});
  redis.cmd({"XADD", "jobs", "*", "body", "poison-2"});
  redis.cmd({"XADD", "jobs", "*", "body", "flaky"});  // fails once, then completes

  std::mutex mutex;
  std::map<std::string, std::vector<long long>> deliveries;  // body -> delivery counts seen
  rc::context ctx;
  rc::test::event_recorder events(ctx, "plugin:redis:stream:dead");
  rc::redis_connection conn(ctx, {.port = server.port()});
  auto source = rc::redis_stream(
      conn, "jobs", {.group = "g", .block = 50ms, .max_deliveries = 3, .retry_delay = 1ms, .stop_when_empty = true});
  auto stats = source.probe();
  ctx.add(rc::craft().id("work").from(std::move(source)).process([&](rc::exchange& ex) {
    const auto& body = ex.body<std::string>();
    const long long n = ex.header(hdr::delivery_count)->get<long long>();
    {
      std::lock_guard lock(mutex);
      deliveries[body].push_back(n);
    }
    if (body.rfind("poison", 0) == 0 || (body == "flaky" && n == 1)) throw std::runtime_error("cannot process " + body);
  }));
  rc::test::within(30s, [&] {
    ctx.start();
    ctx.drain();
    ctx.stop();
  });

  CHECK(deliveries["ok-1"] == std::vector<long long>{1});
  CHECK(deliveries["ok-2"] == std::vector<long long>{1});
  CHECK(deliveries["flaky"] == std::vector<long long>{1, 2});
  CHECK(deliveries["poison-1"] == std::vector<long long>{1, 2, 3});
  CHECK(deliveries["poison-2"] == std::vector<long long>{1, 2, 3});

  const auto dead = redis.cmd({"XRANGE", "jobs:dead", "-", "+"}).elements;
  REQUIRE(dead.size() == 2);
  CHECK(field(dead[0], "body") == "poison-1");
  CHECK(field(dead[0], "tenant") == "acme");  // the entry's own fields travel with it
  CHECK(field(dead[0], "deliveries") == "3");
  CHECK(field(dead[0], "stream") == "jobs");
  CHECK(field(dead[0], "error").find("cannot process poison-1") != std::string::npos);
  CHECK(field(dead[1], "body") == "poison-2");
  CHECK(pending(redis, "jobs", "g") == 0);  // dead letters are acknowledged too
  CHECK(events.count("plugin:redis:stream:dead") == 2);
  const auto s = stats();
  CHECK(s.acked == 3);
  CHECK(s.dead == 2);
  CHECK(s.retried == 5);  // flaky once, each poison twice
  CHECK(s.ack_missed == 0);
}

TEST_CASE("redis_stream: the source holds at most max_in_flight entries read and unfinished", "[redis]") {
  rc::test::redis_server server;
  rc::test::sync_redis redis(server.port());
  seed(redis, "work", 300);

  rc::context ctx;
  rc::redis_connection conn(ctx, {.port = server.port()});
  auto source = rc::redis_stream(
      conn, "work", {.group = "g", .consumer = "only", .max_in_flight = 8, .block = 50ms, .stop_when_empty = true});
  auto stats = source.probe();
  std::atomic<int> running{0}, most{0};
  auto& route = ctx.add(rc::craft().id("slow").from(std::move(source)).delay(3ms).process([&](rc::exchange&) {
    const int now = ++running;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
    --running;
  }));
  std::atomic<bool> done{false};
  long long most_pending = 0;
  std::size_t most_in_flight = 0;
  std::thread sampler([&] {
    rc::test::sync_redis probe(server.port());
    while (!done) {
      try {
        const auto rows = probe.cmd({"XPENDING", "work", "g", "-", "+", "100", "only"}).elements;
        most_pending = std::max<long long>(most_pending, static_cast<long long>(rows.size()));
      } catch (const std::exception&) {
        // the group does not exist yet
      }
      most_in_flight = std::max(most_in_flight, route.in_flight());
      std::this_thread::sleep_for(1ms);
    }
  });
  rc::test::within(60s, [&] {
    ctx.start();
    ctx.drain();
    ctx.stop();
  });
  done = true;
  sampler.join();
  CHECK(stats().acked == 300);
  CHECK(stats().peak_in_flight == 8);  // the bound is reached (runs overlap) and never passed
  CHECK(most_pending <= 8);
  CHECK(most_pending >= 2);
  CHECK(most_in_flight <= 8);
  CHECK(pending(redis, "work", "g") == 0);
}

// The consumer the next test kills: a child process running this test binary with this hidden
// test selected by name, told where to connect through the environment.
TEST_CASE("redis_stream child consumer", "[.redis-child]") {
  const char* port = std::getenv("RC_STREAM_CHILD_PORT");
  if (!port) return;
  rc::context ctx;
  rc::redis_connection conn(ctx, {.port = static_cast<std::uint16_t>(std::stoi(port)), .command_timeout = 10s});
  ctx.add(rc::craft()
              .id("doomed")
              .from(rc::redis_stream(conn, "jobs", {.group = "g", .consumer = "doomed", .max_in_flight = 50}))
              .delay(20ms)  // slow, so that it always holds entries when it is killed
              .to(recorder(conn, "jobs:out", "doomed")));
  ctx.start();
  for (;;) std::this_thread::sleep_for(1s);  // until killed
}

TEST_CASE("redis_stream: 10,000 entries, three consumers, one killed mid-batch: all processed, each acked once",
          "[redis]") {
  rc::test::redis_server server;
  rc::test::sync_redis redis(server.port());
  const auto ids = seed(redis, "jobs", 10'000);
  REQUIRE(ids.size() == 10'000);
  redis.cmd({"XGROUP", "CREATE", "jobs", "g", "0"});

  // The consumer to kill: a child process, started first so that it is busy when killed.
  const std::string port_env = "RC_STREAM_CHILD_PORT=" + std::to_string(server.port());
  std::vector<std::string> args{"/proc/self/exe", "redis_stream child consumer"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings{port_env};
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t child = 0;
  REQUIRE(::posix_spawn(&child, argv[0], nullptr, nullptr, argv.data(), envp.data()) == 0);
  struct reaper {
    pid_t& pid;
    ~reaper() {
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  } reap{child};

  auto wait_out = [&](long long n) {
    const auto until = std::chrono::steady_clock::now() + 30s;
    while (redis.integer({"XLEN", "jobs:out"}) < n) {
      REQUIRE(std::chrono::steady_clock::now() < until);
      std::this_thread::sleep_for(2ms);
    }
  };
  wait_out(1000);

  // Two consumers in this process, each in its own context.
  struct survivor {
    rc::context ctx;
    rc::redis_connection conn;
    std::function<rc::redis_stream_stats()> stats;
    survivor(std::uint16_t port, const std::string& name) : conn(ctx, {.port = port, .command_timeout = 10s}) {
      auto source = rc::redis_stream(conn, "jobs",
                                     {.group = "g",
                                      .consumer = name,
                                      .max_in_flight = 50,
                                      .block = 50ms,
                                      .min_idle = 300ms,
                                      .claim_interval = 50ms,
                                      .stop_when_empty = true});
      stats = source.probe();
      ctx.add(rc::craft().id(name).from(std::move(source)).delay(1ms).to(recorder(conn, "jobs:out", name)));
    }
  };
  survivor a(server.port(), "a");
  survivor b(server.port(), "b");
  a.ctx.start();
  b.ctx.start();

  wait_out(3000);
  // Kill it while it holds entries (read, maybe processed, not acknowledged). Between two reads it
  // may briefly hold none, so freeze it first, let the commands it had already sent reach the
  // server, and count what it holds; if that is nothing, let it run a little and try again.
  std::size_t held = 0;
  for (int attempt = 0; attempt < 200 && held == 0; ++attempt) {
    ::kill(child, SIGSTOP);
    std::this_thread::sleep_for(50ms);
    held = redis.cmd({"XPENDING", "jobs", "g", "-", "+", "1000", "doomed"}).elements.size();
    if (held == 0) {
      ::kill(child, SIGCONT);
      std::this_thread::sleep_for(7ms);
    }
  }
  REQUIRE(held > 0);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  child = 0;

  rc::test::within(60s, [&] {
    a.ctx.drain();
    b.ctx.drain();
  });
  a.ctx.stop();
  b.ctx.stop();

  // Every entry processed, none pending (each acknowledged), none lost.
  CHECK(pending(redis, "jobs", "g") == 0);
  const auto runs = recorded(redis, "jobs:out");
  std::map<std::string, int> times;
  for (const auto& id : runs) ++times[id];
  CHECK(times.size() == ids.size());
  CHECK(std::set<std::string>(ids.begin(), ids.end()) == [&] {
    std::set<std::string> s;
    for (const auto& [id, n] : times) s.insert(id);
    return s;
  }());
  // Only what the killed consumer held can have run twice (at least once delivery).
  const std::size_t twice = runs.size() - times.size();
  CHECK(twice <= held);
  for (const auto& [id, n] : times) CHECK(n <= 2);
  // Acknowledged once: the survivors' XACKs always found the entry pending, and together with the
  // child's (its runs not run again) they make exactly one per entry.
  const auto sa = a.stats(), sb = b.stats();
  CHECK(sa.ack_missed == 0);
  CHECK(sb.ack_missed == 0);
  std::size_t by_child = 0;
  for (const auto& e : redis.cmd({"XRANGE", "jobs:out", "-", "+"}).elements)
    if (field(e, "by") == "doomed") ++by_child;
  INFO("acked a=" << sa.acked << " b=" << sb.acked << ", delivered a=" << sa.delivered << " b=" << sb.delivered
                  << ", retried " << sa.retried + sb.retried << ", by child " << by_child << ", twice " << twice);
  // A successful XACK per entry: the survivors' and the child's that were not run again. (A
  // command that timed out on the client but ran on the server would break the count: under load
  // it is a retry, so the connections here have a generous timeout.)
  CHECK(sa.acked + sb.acked + (by_child - twice) == ids.size());
  CHECK(sa.claimed + sb.claimed >= held);
  CHECK(redis.integer({"EXISTS", "jobs:dead"}) == 0);
}

}  // namespace redis_stream_test
