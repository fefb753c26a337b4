// rc::redis_store's batching against a real redis-server: decisions asked together go out as one
// script call and decide exactly as they would one by one (admissions, their order, the
// retry-after and the reservation chain), a batch during an outage fails decision by decision
// (each on its own deadline, each gate applying its on_error), and on a Redis Cluster the store
// does not batch (automatic), or stops batching when the server refuses a batch as cross-slot.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <cstring>
#include <future>
#include <optional>
#include <rc/rc.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/dsl_support.hpp"
#include "support/redis_server.hpp"

namespace redis_store_batch_test {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

struct decided {
  std::optional<rc::store_answer> answer;
  std::string error;  // the rc::error's code ("RC5011") when the decision failed
  double ms = 0;      // from asking to the answer
};

// An io_context of its own, run by one thread, with one connection: decisions are asked on it
// all in one turn (so the store batches them) or one after the other.
class driver {
 public:
  explicit driver(std::uint16_t port, rc::duration command_timeout = 5s)
      : guard_(boost::asio::make_work_guard(io_)),
        conn(io_,
             rc::redis_options{
                 .port = port, .command_timeout = command_timeout, .reconnect_min = 10ms, .reconnect_max = 50ms}),
        thread_([this] { io_.run(); }) {}
  ~driver() {
    conn.close();
    guard_.reset();
    io_.stop();
    thread_.join();
  }

  /// Every query asked in the same turn of the io thread; the answers in the queries' order.
  std::vector<decided> together(rc::decision_store& store, const std::vector<rc::store_query>& qs) {
    std::vector<decided> out(qs.size());
    std::promise<void> done;
    std::size_t left = qs.size();
    boost::asio::post(io_, [&] {
      for (std::size_t i = 0; i < qs.size(); ++i)
        rc::spawn([&, i]() -> rc::task<void> {
          co_await ask(store, qs[i], out[i]);
          if (--left == 0) done.set_value();
        });
    });
    done.get_future().wait();
    return out;
  }

  /// Each query asked once the one before it is answered.
  std::vector<decided> one_by_one(rc::decision_store& store, const std::vector<rc::store_query>& qs) {
    std::vector<decided> out(qs.size());
    std::promise<void> done;
    boost::asio::post(io_, [&] {
      rc::spawn([&]() -> rc::task<void> {
        for (std::size_t i = 0; i < qs.size(); ++i) co_await ask(store, qs[i], out[i]);
        done.set_value();
      });
    });
    done.get_future().wait();
    return out;
  }

  /// Waits (really, briefly) until the connection is up or down.
  void wait_connected(bool up) {
    const auto until = steady::now() + 5s;
    while (conn.connected() != up && steady::now() < until) std::this_thread::sleep_for(5ms);
    REQUIRE(conn.connected() == up);
  }

 private:
  static rc::task<void> ask(rc::decision_store& store, const rc::store_query& q, decided& d) {
    const auto t0 = steady::now();
    try {
      d.answer = co_await store.decide(q);
    } catch (const rc::error& e) {
      d.error = e.code_string();
    } catch (...) {
      d.error = "other";
    }
    d.ms = std::chrono::duration<double, std::milli>(steady::now() - t0).count();
  }

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;

 public:
  rc::redis_connection conn;

 private:
  std::thread thread_;
};

/// Script calls the server has run (EVALSHA and EVAL) since its start.
long long script_calls(const rc::test::redis_server& server) {
  const std::string info = server.raw({"INFO", "commandstats"});
  long long n = 0;
  for (const char* name : {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="})
    if (auto at = info.find(name); at != std::string::npos) n += std::stoll(info.substr(at + std::strlen(name)));
  return n;
}

rc::store_query throttle(std::string_view key, rc::duration interval, rc::duration tolerance, bool reserve = false,
                         std::optional<rc::duration> max_wait = std::nullopt) {
  rc::store_query q;
  q.what = rc::store_query::kind::throttle;
  q.key = key;
  q.interval = interval;
  q.tolerance = tolerance;
  q.reserve = reserve;
  q.max_wait = max_wait;
  return q;
}

rc::store_query window(rc::store_query::kind k, std::string_view key, rc::duration w, std::uint64_t limit) {
  rc::store_query q;
  q.what = k;
  q.key = key;
  q.window = w;
  q.limit = limit;
  return q;
}

std::vector<bool> admitted(const std::vector<decided>& v) {
  std::vector<bool> out;
  for (const auto& d : v) out.push_back(d.answer && d.answer->admitted);
  return out;
}

}  // namespace

TEST_CASE("redis store batch: throttle decisions in one call admit, refuse and reserve as one by one", "[redis]") {
  rc::test::redis_server server;
  driver drv(server.port());
  auto batched = rc::redis_store(drv.conn, {.prefix = "b", .timeout = 2s, .batch = rc::redis_batching::on});
  auto single = rc::redis_store(drv.conn, {.prefix = "s", .timeout = 2s, .batch = rc::redis_batching::off});
  (void)drv.one_by_one(*batched, {throttle("warm", 1s, 0s)});  // the server learns the script

  SECTION("reject mode: the burst of each key, in the order asked, then the exact retry-after") {
    // Two keys interleaved, burst 5 at one per second: a key's first five pass, the rest wait a
    // whole interval (they are decided on one read of the server's clock).
    std::vector<rc::store_query> qs;
    for (int i = 0; i < 24; ++i) qs.push_back(throttle(i % 3 == 2 ? "j" : "k", 1s, 4s));
    const long long calls = script_calls(server);
    const auto b = drv.together(*batched, qs);
    CHECK(script_calls(server) - calls == 1);  // 24 decisions, one script call
    const auto s = drv.one_by_one(*single, qs);
    CHECK(script_calls(server) - calls == 25);
    REQUIRE(admitted(b) == admitted(s));
    int k_admitted = 0, j_admitted = 0;
    for (std::size_t i = 0; i < qs.size(); ++i) {
      REQUIRE(b[i].answer);
      REQUIRE(s[i].answer);
      const bool is_k = qs[i].key == "k";
      if (b[i].answer->admitted) {
        (is_k ? k_admitted : j_admitted)++;
        CHECK(b[i].answer->wait == 0s);
      } else {
        // Exact in the batch; one by one, a decision a little later waits a little less.
        CHECK(b[i].answer->wait == 1s);
        CHECK(s[i].answer->wait <= 1s);
        CHECK(s[i].answer->wait > 900ms);
      }
    }
    CHECK(k_admitted == 5);
    CHECK(j_admitted == 5);
    // The first five asked of each key are the ones admitted.
    for (std::size_t i = 0, k = 0; i < qs.size(); ++i)
      if (qs[i].key == "k") CHECK(b[i].answer->admitted == (k++ < 5));
  }

  SECTION("delay mode: reservations chained in the order asked, max_wait refusing without reserving") {
    std::vector<rc::store_query> qs;
    for (int i = 0; i < 8; ++i) qs.push_back(throttle("r", 100ms, 0s, true, 350ms));
    const auto b = drv.together(*batched, qs);
    const auto s = drv.one_by_one(*single, qs);
    REQUIRE(admitted(b) == std::vector<bool>{true, true, true, true, false, false, false, false});
    REQUIRE(admitted(s) == admitted(b));
    for (std::size_t i = 0; i < 4; ++i) {
      CHECK(b[i].answer->wait == std::chrono::milliseconds(100 * i));
      // The chain itself (admission instants on the server's clock) is the same both ways.
      CHECK(b[i].answer->admit_at_us - b[0].answer->admit_at_us == static_cast<std::int64_t>(100'000 * i));
      CHECK(s[i].answer->admit_at_us - s[0].answer->admit_at_us == static_cast<std::int64_t>(100'000 * i));
    }
    // A refusal reserved nothing: each later one is refused with the same wait.
    for (std::size_t i = 4; i < 8; ++i) CHECK(b[i].answer->wait == 400ms);
  }
}

TEST_CASE("redis store batch: fixed and sliding counts in one call, mixed with throttle, as one by one", "[redis]") {
  rc::test::redis_server server;
  driver drv(server.port());
  auto batched = rc::redis_store(drv.conn, {.prefix = "b", .timeout = 2s, .batch = rc::redis_batching::on});
  auto single = rc::redis_store(drv.conn, {.prefix = "s", .timeout = 2s, .batch = rc::redis_batching::off});
  using kind = rc::store_query::kind;
  std::vector<rc::store_query> qs;
  for (int i = 0; i < 6; ++i) {
    qs.push_back(window(kind::fixed_window, "a", 10s, 3));
    qs.push_back(window(kind::sliding_window, "a", 10s, 3));
    qs.push_back(window(kind::sliding_window, "b", 10s, 3));  // the same parameters, another key
    qs.push_back(throttle("a", 1s, 1s));
  }
  const auto b = drv.together(*batched, qs);
  const auto s = drv.one_by_one(*single, qs);
  std::uint64_t fixed = 0, sliding_a = 0, sliding_b = 0;
  for (std::size_t i = 0; i < qs.size(); ++i) {
    INFO("decision " << i);
    REQUIRE(b[i].answer);
    REQUIRE(s[i].answer);
    CHECK(b[i].answer->hits == s[i].answer->hits);
    CHECK(b[i].answer->admitted == s[i].answer->admitted);
    switch (qs[i].what) {
      case kind::fixed_window:
        CHECK(b[i].answer->hits == ++fixed);
        CHECK(b[i].answer->reset > 9s);
        CHECK(b[i].answer->reset <= 10s);
        CHECK(b[i].answer->retry_after == b[i].answer->reset);
        break;
      case kind::sliding_window:
        CHECK(b[i].answer->hits == (qs[i].key == "a" ? ++sliding_a : ++sliding_b));
        // All in one bucket: the count drops when it leaves the window, 10 to 11 s away; over
        // the limit, that is also when a new hit fits.
        CHECK(b[i].answer->reset > 10s);
        CHECK(b[i].answer->reset <= 11s);
        CHECK(b[i].answer->retry_after == (b[i].answer->hits >= 3 ? b[i].answer->reset : 0s));
        if (s[i].answer->hits < 3) CHECK(s[i].answer->retry_after == 0s);
        break;
      case kind::throttle:
        CHECK(b[i].answer->admitted == (i < 8));  // burst 2
        break;
    }
  }
}

TEST_CASE("redis store batch: an outage fails every decision of a batch, each on its own deadline", "[redis]") {
  rc::test::redis_server server;
  driver drv(server.port());
  // 500 ms: "at once" and "at its deadline" stay far apart even for a loaded sanitizer build.
  auto store = rc::redis_store(drv.conn, {.prefix = "o", .timeout = 500ms, .batch = rc::redis_batching::on});
  std::vector<rc::store_query> qs(40, throttle("k", 1ms, 10ms));
  REQUIRE(drv.together(*store, qs)[0].answer);

  SECTION("killed: every decision fails at once with RC5010, batched into few commands") {
    server.kill();
    drv.wait_connected(false);
    const auto failed_before = drv.conn.stats().failed;
    const auto r = drv.together(*store, qs);
    for (const auto& d : r) {
      CHECK_FALSE(d.answer);
      CHECK(d.error == "RC5010");
      CHECK(d.ms < 250);  // not its deadline
    }
    CHECK(drv.conn.stats().failed - failed_before < qs.size());
    server.restart();
    drv.wait_connected(true);
    for (const auto& d : drv.together(*store, qs)) CHECK(d.answer);
  }

  SECTION("paused: queued decisions fail with RC5011 at their own deadline, never later") {
    server.pause();
    std::vector<std::future<std::vector<decided>>> waves;
    for (int w = 0; w < 4; ++w) {  // two calls out, the later waves queued behind them
      waves.push_back(std::async(std::launch::async, [&] { return drv.together(*store, qs); }));
      std::this_thread::sleep_for(40ms);
    }
    for (std::size_t w = 0; w < waves.size(); ++w)
      for (const auto& d : waves[w].get()) {
        CHECK(d.error == "RC5011");
        CHECK(d.ms < 500 + 100);         // never past the timeout (plus the timer's slack on a loaded machine)
        if (w == 0) CHECK(d.ms >= 490);  // the first call waits out its whole timeout
      }
    server.resume();
    for (const auto& d : drv.together(*store, qs)) CHECK(d.answer);
  }

  SECTION("closed: decisions out and queued fail with RC5010, none is left waiting") {
    server.pause();
    std::vector<std::future<std::vector<decided>>> waves;
    for (int w = 0; w < 3; ++w) {
      waves.push_back(std::async(std::launch::async, [&] { return drv.together(*store, qs); }));
      std::this_thread::sleep_for(20ms);
    }
    drv.conn.close();
    for (auto& wave : waves)
      for (const auto& d : wave.get()) {
        CHECK(d.error == "RC5010");
        CHECK(d.ms < 400);  // at the close (~60 ms in), not at the deadline
      }
    server.resume();
  }
}

TEST_CASE("redis store batch: during an outage each gate of a batch applies its on_error per exchange", "[redis]") {
  rc::test::redis_server server;
  for (auto on_error : {rc::store_on_error::fail_closed, rc::store_on_error::local}) {
    rc::context ctx;
    rc::redis_connection conn(ctx, {.port = server.port(), .reconnect_min = 10ms, .reconnect_max = 50ms});
    auto store =
        rc::redis_store(conn, {.prefix = "g", .timeout = 200ms, .on_error = on_error, .batch = rc::redis_batching::on});
    rc::test::event_recorder events(ctx);
    std::vector<std::unique_ptr<rc::spy<int>>> outs;
    // Eight routes, each its own gate on the one store: their decisions meet in the store's batches.
    for (int r = 0; r < 8; ++r) {
      outs.push_back(std::make_unique<rc::spy<int>>());
      std::vector<int> items(10);
      ctx.add(rc::craft()
                  .id("r" + std::to_string(r))
                  .from(rc::simple(items))
                  .rate_limit({.limit = 3, .window = 1min, .store = store})
                  .to(*outs.back()));
    }
    server.kill();
    const auto until = steady::now() + 5s;
    while (conn.connected() && steady::now() < until) std::this_thread::sleep_for(5ms);
    const auto failed_before = conn.stats().failed;
    ctx.start();
    ctx.drain();
    ctx.stop();
    INFO("on_error " << (on_error == rc::store_on_error::local ? "local" : "fail_closed"));
    // Every exchange was decided by on_error: nothing passes fail_closed, local meters each gate.
    for (const auto& out : outs) CHECK(out->bodies().size() == (on_error == rc::store_on_error::local ? 3U : 0U));
    CHECK(events.named("route:rateLimit:rejected").size() == (on_error == rc::store_on_error::local ? 56U : 80U));
    CHECK(events.count("route:store:failed") == 8);  // once per gate
    // The 80 decisions failed in fewer commands than decisions: they were batched.
    CHECK(conn.stats().failed - failed_before < 80);
    server.restart();
  }
}

TEST_CASE("redis store batch: on a Redis Cluster node the store decides one key per call", "[redis]") {
  rc::test::redis_server server({"--cluster-enabled", "yes"});
  server.raw({"CLUSTER", "ADDSLOTSRANGE", "0", "16383"});
  const auto until = steady::now() + 10s;
  while (server.raw({"CLUSTER", "INFO"}).find("cluster_state:ok") == std::string::npos && steady::now() < until)
    std::this_thread::sleep_for(20ms);
  REQUIRE(server.raw({"CLUSTER", "INFO"}).find("cluster_state:ok") != std::string::npos);
  driver drv(server.port());
  using kind = rc::store_query::kind;
  const std::vector<std::string> keys = {"a", "b", "c", "d", "e", "f", "g", "h"};
  std::vector<rc::store_query> qs;
  for (int round = 0; round < 3; ++round)
    for (const auto& k : keys) qs.push_back(window(kind::fixed_window, k, 10s, 100));
  auto check_counts = [&](const std::vector<decided>& r) {
    for (std::size_t i = 0; i < r.size(); ++i) {
      REQUIRE(r[i].answer);
      CHECK(r[i].answer->hits == i / keys.size() + 1);
    }
  };

  SECTION("automatic: INFO cluster says cluster_enabled:1, so no batch") {
    auto store = rc::redis_store(drv.conn, {.prefix = "auto", .timeout = 2s});
    (void)drv.one_by_one(*store, {window(kind::fixed_window, "warm", 10s, 100)});  // the probe goes out
    std::this_thread::sleep_for(50ms);
    const long long calls = script_calls(server);
    check_counts(drv.together(*store, qs));
    CHECK(script_calls(server) - calls == static_cast<long long>(qs.size()));
  }
  SECTION("on: the server refuses the cross-slot batch, the store decides one by one from then on") {
    auto store = rc::redis_store(drv.conn, {.prefix = "on", .timeout = 2s, .batch = rc::redis_batching::on});
    check_counts(drv.together(*store, qs));
    std::vector<rc::store_query> more(qs.begin(), qs.begin() + static_cast<std::ptrdiff_t>(keys.size()));
    const long long calls = script_calls(server);
    for (const auto& d : drv.together(*store, more)) CHECK(d.answer->hits == 4);
    CHECK(script_calls(server) - calls == static_cast<long long>(keys.size()));
  }
}

TEST_CASE("redis store batch: bad batch options are refused", "[redis]") {
  rc::test::redis_server server;
  driver drv(server.port());
  CHECK_THROWS_WITH(rc::redis_store(drv.conn, {.max_batch = 0}),
                    Catch::Contains("max_batch") && Catch::Contains("got 0"));
  CHECK_THROWS_WITH(rc::redis_store(drv.conn, {.batch = static_cast<rc::redis_batching>(7)}),
                    Catch::Contains("batch") && Catch::Contains("got 7"));
}

TEST_CASE("redis store batch: a decision the server refuses fails alone, the others in its call stand", "[redis]") {
  rc::test::redis_server server;
  driver drv(server.port());
  auto store = rc::redis_store(drv.conn, {.prefix = "w", .timeout = 2s, .batch = rc::redis_batching::on});
  (void)drv.one_by_one(*store, {throttle("warm", 1s, 0s)});  // the server learns the script
  // A key of another type under the name the fixed window would use: INCR on it is an error.
  server.raw({"LPUSH", "{w:bad}:fw", "x"});
  const auto fixed = rc::store_query::kind::fixed_window;
  const long long calls = script_calls(server);
  const auto b = drv.together(*store, {window(fixed, "a", 60s, 10), window(fixed, "bad", 60s, 10),
                                       window(fixed, "a", 60s, 10), throttle("t", 1s, 0s)});
  CHECK(script_calls(server) - calls == 1);
  REQUIRE(b[0].answer);
  CHECK(b[0].answer->hits == 1);
  CHECK_FALSE(b[1].answer);
  CHECK(b[1].error == "RC5010");
  REQUIRE(b[2].answer);
  CHECK(b[2].answer->hits == 2);
  REQUIRE(b[3].answer);
  CHECK(b[3].answer->admitted);
  // The decisions that stood were counted once: the next hit of "a" is its third.
  const auto next = drv.one_by_one(*store, {window(fixed, "a", 60s, 10)});
  REQUIRE(next[0].answer);
  CHECK(next[0].answer->hits == 3);
}

}  // namespace redis_store_batch_test
