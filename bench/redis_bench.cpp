// redis-bench: shared-limit decisions per second and their latency, through one pipelined
// rc::redis_connection on loopback, one io thread. `concurrency` decisions are in flight at any
// time (callers waiting on their gate); each run makes `n` decisions over `keys` keys; a result
// is the median of `runs` runs (by decisions/s; its p50 and p99 with it).
//
//   redis-bench [--redis HOST:PORT] [--kind throttle|fixed|sliding|all] [--n N] [--concurrency C]
//               [--keys K] [--runs R] [--batch automatic|on|off]
//
// Without --redis it starts its own redis-server (loopback, no persistence). One JSON object per
// kind: {"kind", "decisions", "decisions_per_s", "p50_us", "p99_us", "max_us", "runs", ...}, with
// the CPU each decision cost, taken over all runs of the kind so that they hold on a loaded
// machine: "server_cpu_us" (redis-server's used_cpu_user + used_cpu_sys from INFO cpu, per
// decision), "client_cpu_us" (this process, per decision) and "decisions_per_call" (decisions
// over the script calls INFO commandstats counted).
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <rc/rc.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_server.hpp"

namespace {

using steady = std::chrono::steady_clock;

struct config {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string kind = "all";
  std::size_t n = 200000;
  std::size_t concurrency = 64;
  std::size_t keys = 1000;
  int runs = 3;
  rc::redis_batching batch = rc::redis_batching::automatic;
};

// The server's CPU seconds (user + sys) and script calls so far.
struct server_sample {
  double cpu_s = 0;
  double calls = 0;
};

double info_field(const std::string& info, const std::string& name) {
  const auto at = info.find(name);
  if (at == std::string::npos) return 0;
  return std::strtod(info.c_str() + at + name.size(), nullptr);
}

server_sample sample_server(rc::redis_connection& conn) {
  std::promise<std::string> p;
  conn.command({"INFO", "cpu", "commandstats"},
               [&](std::error_code ec, rc::redis_reply r) { p.set_value(ec ? std::string() : r.str); });
  const std::string info = p.get_future().get();
  return {info_field(info, "used_cpu_sys:") + info_field(info, "used_cpu_user:"),
          info_field(info, "cmdstat_evalsha:calls=") + info_field(info, "cmdstat_eval:calls=")};
}

double process_cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct run_result {
  double per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  double max_us = 0;
  std::size_t failed = 0;
};

rc::store_query query_for(const std::string& kind) {
  rc::store_query q;
  if (kind == "throttle") {
    q.what = rc::store_query::kind::throttle;
    q.interval = std::chrono::microseconds(100);   // 10,000/s per key
    q.tolerance = std::chrono::microseconds(900);  // burst 10
  } else if (kind == "fixed") {
    q.what = rc::store_query::kind::fixed_window;
    q.window = std::chrono::seconds(60);
    q.limit = 100;
  } else {
    q.what = rc::store_query::kind::sliding_window;
    q.window = std::chrono::seconds(60);
    q.limit = 100;
  }
  return q;
}

run_result run_once(boost::asio::io_context& io, rc::decision_store& store, const config& c, const std::string& kind,
                    const std::vector<std::string>& keys) {
  std::vector<double> lat(c.n);
  std::size_t next = 0, done = 0, failed = 0;
  std::promise<void> finished;
  const auto start = steady::now();
  // `concurrency` callers on the io thread, each starting its next decision when the last ends.
  struct caller {
    static rc::task<void> run(rc::decision_store& store, const config& c, const std::string& kind,
                              const std::vector<std::string>& keys, std::vector<double>& lat, std::size_t& next,
                              std::size_t& done, std::size_t& failed, std::promise<void>& finished) {
      while (next < c.n) {
        const std::size_t i = next++;
        rc::store_query q = query_for(kind);
        q.key = keys[i % keys.size()];
        const auto t0 = steady::now();
        try {
          (void)co_await store.decide(q);
        } catch (...) {
          ++failed;
        }
        lat[i] = std::chrono::duration<double, std::micro>(steady::now() - t0).count();
        if (++done == c.n) finished.set_value();
      }
    }
  };
  boost::asio::post(io, [&] {
    for (std::size_t k = 0; k < c.concurrency; ++k)
      rc::spawn(
          [&]() -> rc::task<void> { co_await caller::run(store, c, kind, keys, lat, next, done, failed, finished); });
  });
  finished.get_future().wait();
  const double secs = std::chrono::duration<double>(steady::now() - start).count();
  std::sort(lat.begin(), lat.end());
  run_result r;
  r.per_s = static_cast<double>(c.n) / secs;
  r.p50_us = lat[lat.size() / 2];
  r.p99_us = lat[std::min(lat.size() - 1, lat.size() * 99 / 100)];
  r.max_us = lat.back();
  r.failed = failed;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "redis-bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--redis") {
      const std::string at = next();
      c.host = at.substr(0, at.rfind(':'));
      c.port = static_cast<std::uint16_t>(std::stoi(at.substr(at.rfind(':') + 1)));
    } else if (a == "--kind") {
      c.kind = next();
    } else if (a == "--n") {
      c.n = std::stoul(next());
    } else if (a == "--concurrency") {
      c.concurrency = std::stoul(next());
    } else if (a == "--keys") {
      c.keys = std::stoul(next());
    } else if (a == "--runs") {
      c.runs = std::stoi(next());
    } else if (a == "--batch") {
      const std::string b = next();
      if (b == "automatic")
        c.batch = rc::redis_batching::automatic;
      else if (b == "on")
        c.batch = rc::redis_batching::on;
      else if (b == "off")
        c.batch = rc::redis_batching::off;
      else {
        std::fprintf(stderr, "redis-bench: --batch is automatic, on or off\n");
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: redis-bench [--redis HOST:PORT] [--kind throttle|fixed|sliding|all] [--n N] "
                   "[--concurrency C] [--keys K] [--runs R] [--batch automatic|on|off]\n");
      return 2;
    }
  }
  if (c.n == 0 || c.concurrency == 0 || c.keys == 0 || c.runs < 1) {
    std::fprintf(stderr, "redis-bench: --n, --concurrency, --keys and --runs must be at least 1\n");
    return 2;
  }
  std::unique_ptr<rc::test::redis_server> own;
  if (c.port == 0) {
    own = std::make_unique<rc::test::redis_server>();
    c.port = own->port();
  }

  boost::asio::io_context io;
  auto guard = boost::asio::make_work_guard(io);
  std::thread thread([&] { io.run(); });
  int status = 0;
  {
    rc::redis_connection conn(io, {.host = c.host, .port = c.port, .command_timeout = std::chrono::seconds(5)});
    auto store = rc::redis_store(conn, {.prefix = "bench", .timeout = std::chrono::seconds(5), .batch = c.batch});
    std::vector<std::string> keys;
    for (std::size_t k = 0; k < c.keys; ++k) keys.push_back("client-" + std::to_string(k));
    std::vector<std::string> kinds =
        c.kind == "all" ? std::vector<std::string>{"throttle", "fixed", "sliding"} : std::vector<std::string>{c.kind};
    for (const auto& kind : kinds) {
      std::vector<run_result> runs;
      const server_sample s0 = sample_server(conn);
      const double client0 = process_cpu_s();
      for (int r = 0; r < c.runs; ++r) runs.push_back(run_once(io, *store, c, kind, keys));
      const double client_s = process_cpu_s() - client0;
      const server_sample s1 = sample_server(conn);
      const double total = static_cast<double>(c.n) * c.runs;
      const double calls = s1.calls - s0.calls;
      std::sort(runs.begin(), runs.end(), [](const run_result& a, const run_result& b) { return a.per_s < b.per_s; });
      const run_result& m = runs[runs.size() / 2];
      std::size_t failed = 0;
      for (const auto& r : runs) failed += r.failed;
      std::printf(
          "{\"kind\":\"%s\",\"decisions\":%zu,\"decisions_per_s\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,"
          "\"runs\":%d,\"concurrency\":%zu,\"keys\":%zu,\"failed\":%zu,\"server_cpu_us\":%.2f,\"client_cpu_us\":%.2f,"
          "\"decisions_per_call\":%.1f}\n",
          kind.c_str(), c.n, m.per_s, m.p50_us, m.p99_us, m.max_us, c.runs, c.concurrency, c.keys, failed,
          (s1.cpu_s - s0.cpu_s) * 1e6 / total, client_s * 1e6 / total, calls > 0 ? total / calls : 0.0);
      std::fflush(stdout);
      if (failed != 0) status = 1;
    }
  }
  guard.reset();
  io.stop();
  thread.join();
  return status;
}
