// Saturated traffic through one shared gate on Redis, for the shared-limit tests and their
// helper process (tools/redis_flood_main.cpp). `workers` routes per context, each a generator
// that sends its next exchange as soon as the previous one is done, all through a gate with the
// same store prefix and key, so every worker of every context and process shares one limit.
// Admission times are CLOCK_MONOTONIC (one clock for every process of the machine).
#pragma once

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <rc/rc.hpp>
#include <string>
#include <thread>
#include <vector>

namespace rc::test {

// The store's timeout in the flood tests. A decision that outlives it is not metered (fail_open)
// or refused, so it must stay well above a decision's round trip: sanitizer builds run 5-15x
// slower, and under ctest -j several floods share the cores (a stall of the timeout's length on
// a loaded machine would let one exchange through unmetered, which the shared-limit tests refuse).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr std::int64_t flood_timeout_ms = 400;
#else
inline constexpr std::int64_t flood_timeout_ms = 100;
#endif

inline std::int64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline std::int64_t real_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct flood_config {
  std::uint16_t port = 0;
  std::string gate = "throttle";  // throttle | rate_limit
  std::string mode = "reject";    // throttle: reject | delay
  double rate = 1000;
  double burst = 10;
  std::int64_t limit = 100;  // rate_limit
  std::int64_t window_ms = 1000;
  std::string counting = "sliding";
  std::string prefix = "flood";
  std::int64_t run_ms = 3000;
  int workers = 8;
  std::string on_error = "fail_open";
  std::int64_t timeout_ms = flood_timeout_ms;
  std::int64_t start_at_ns = 0;  // CLOCK_MONOTONIC instant to start at (0: now)

  nlohmann::json to_json() const {
    return {{"port", port},
            {"gate", gate},
            {"mode", mode},
            {"rate", rate},
            {"burst", burst},
            {"limit", limit},
            {"window_ms", window_ms},
            {"counting", counting},
            {"prefix", prefix},
            {"run_ms", run_ms},
            {"workers", workers},
            {"on_error", on_error},
            {"timeout_ms", timeout_ms},
            {"start_at_ns", start_at_ns}};
  }
  static flood_config from_json(const nlohmann::json& j) {
    flood_config c;
    c.port = j.at("port");
    c.gate = j.at("gate");
    c.mode = j.at("mode");
    c.rate = j.at("rate");
    c.burst = j.at("burst");
    c.limit = j.at("limit");
    c.window_ms = j.at("window_ms");
    c.counting = j.at("counting");
    c.prefix = j.at("prefix");
    c.run_ms = j.at("run_ms");
    c.workers = j.at("workers");
    c.on_error = j.at("on_error");
    c.timeout_ms = j.at("timeout_ms");
    c.start_at_ns = j.at("start_at_ns");
    return c;
  }
};

struct flood_result {
  std::vector<std::int64_t> admitted_ns;  // when each admitted exchange passed the gate
  std::vector<std::int64_t> admit_at_us;  // throttle: the store's schedule for it (server clock)
  std::uint64_t exchanges = 0;
  std::uint64_t rejected = 0;       // refused by the limit (RC5013 without store_failed)
  std::uint64_t store_refused = 0;  // refused because the store failed (fail_closed)
  std::uint64_t store_failed_events = 0;
  std::uint64_t store_recovered_events = 0;
  std::int64_t longest_exchange_ns = 0;  // reject-mode gates: nothing may wait past the timeout

  nlohmann::json to_json() const {
    return {{"admitted_ns", admitted_ns},
            {"admit_at_us", admit_at_us},
            {"exchanges", exchanges},
            {"rejected", rejected},
            {"store_refused", store_refused},
            {"store_failed_events", store_failed_events},
            {"store_recovered_events", store_recovered_events},
            {"longest_exchange_ns", longest_exchange_ns}};
  }
  static flood_result from_json(const nlohmann::json& j) {
    flood_result r;
    r.admitted_ns = j.at("admitted_ns").get<std::vector<std::int64_t>>();
    r.admit_at_us = j.at("admit_at_us").get<std::vector<std::int64_t>>();
    r.exchanges = j.at("exchanges");
    r.rejected = j.at("rejected");
    r.store_refused = j.at("store_refused");
    r.store_failed_events = j.at("store_failed_events");
    r.store_recovered_events = j.at("store_recovered_events");
    r.longest_exchange_ns = j.at("longest_exchange_ns");
    return r;
  }
  void merge(const flood_result& o) {
    admitted_ns.insert(admitted_ns.end(), o.admitted_ns.begin(), o.admitted_ns.end());
    admit_at_us.insert(admit_at_us.end(), o.admit_at_us.begin(), o.admit_at_us.end());
    exchanges += o.exchanges;
    rejected += o.rejected;
    store_refused += o.store_refused;
    store_failed_events += o.store_failed_events;
    store_recovered_events += o.store_recovered_events;
    longest_exchange_ns = std::max(longest_exchange_ns, o.longest_exchange_ns);
  }
};

inline rc::store_on_error parse_on_error(const std::string& s) {
  if (s == "fail_closed") return rc::store_on_error::fail_closed;
  if (s == "local") return rc::store_on_error::local;
  return rc::store_on_error::fail_open;
}

/// One context flooding the shared gate for run_ms. `during` runs on the calling thread while the
/// traffic flows (kill the server, restart it); the flood ends at run_ms whatever it does.
inline flood_result run_flood(const flood_config& cfg, const std::function<void()>& during = {}) {
  if (cfg.start_at_ns > 0) {
    while (mono_ns() < cfg.start_at_ns) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  rc::context ctx;
  rc::redis_options ro;
  ro.port = cfg.port;
  ro.reconnect_min = std::chrono::milliseconds(10);
  ro.reconnect_max = std::chrono::milliseconds(100);
  rc::redis_connection conn(ctx, ro);
  auto store = rc::redis_store(conn, {.prefix = cfg.prefix,
                                      .timeout = std::chrono::milliseconds(cfg.timeout_ms),
                                      .on_error = parse_on_error(cfg.on_error)});
  std::mutex m;
  flood_result out;
  const std::string passed = cfg.gate == "throttle" ? "route:throttle:passed" : "route:rateLimit:passed";
  auto s1 = ctx.on(passed, [&](const rc::event& e) {
    const std::int64_t now = mono_ns();
    std::lock_guard lock(m);
    out.admitted_ns.push_back(now);
    if (auto it = e.details.find("admitAtUs"); it != e.details.end())
      out.admit_at_us.push_back(it->get<std::int64_t>());
  });
  const std::string rejected = cfg.gate == "throttle" ? "route:throttle:rejected" : "route:rateLimit:rejected";
  auto s2 = ctx.on(rejected, [&](const rc::event& e) {
    std::lock_guard lock(m);
    if (e.details.contains("storeFailed"))
      ++out.store_refused;
    else
      ++out.rejected;
  });
  auto s3 = ctx.on("route:store:failed", [&](const rc::event&) {
    std::lock_guard lock(m);
    ++out.store_failed_events;
  });
  auto s4 = ctx.on("route:store:recovered", [&](const rc::event&) {
    std::lock_guard lock(m);
    ++out.store_recovered_events;
  });

  const std::int64_t start = mono_ns();
  const std::int64_t end = start + cfg.run_ms * 1000000;
  std::vector<std::int64_t> longest(static_cast<std::size_t>(cfg.workers), 0);
  std::atomic<std::uint64_t> exchanges{0};
  for (int w = 0; w < cfg.workers; ++w) {
    auto next = [&, w, last = std::int64_t{0}]() mutable -> std::optional<int> {
      const std::int64_t now = mono_ns();
      if (last != 0) longest[static_cast<std::size_t>(w)] = std::max(longest[static_cast<std::size_t>(w)], now - last);
      last = now;
      if (now >= end) return std::nullopt;
      exchanges.fetch_add(1, std::memory_order_relaxed);
      return w;
    };
    auto route = rc::craft().id("w" + std::to_string(w)).from(rc::generate(std::move(next)));
    if (cfg.gate == "throttle") {
      ctx.add(std::move(route)
                  .throttle({.rate = cfg.rate,
                             .mode = cfg.mode == "delay" ? rc::throttle_mode::delay : rc::throttle_mode::reject,
                             .burst = cfg.burst,
                             .store = store})
                  .process([](rc::exchange&) {}));
    } else {
      ctx.add(std::move(route)
                  .rate_limit({.limit = cfg.limit,
                               .window = std::chrono::milliseconds(cfg.window_ms),
                               .counting = cfg.counting == "fixed" ? rc::counting::fixed : rc::counting::sliding,
                               .store = store})
                  .process([](rc::exchange&) {}));
    }
  }
  ctx.start();
  if (during) during();
  ctx.drain();
  ctx.stop();
  out.exchanges = exchanges.load();
  for (auto l : longest) out.longest_exchange_ns = std::max(out.longest_exchange_ns, l);
  return out;
}

/// The largest amount by which admissions exceed burst + rate * t over any window [a, b] (t = b - a)
/// of the sorted times (seconds). <= 0: the bound holds everywhere.
inline double max_excess(std::vector<double> t, double rate, double burst) {
  std::sort(t.begin(), t.end());
  double best = -std::numeric_limits<double>::infinity();
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < t.size(); ++j) {
    m = std::max(m, rate * t[j] - static_cast<double>(j));
    best = std::max(best, static_cast<double>(j + 1) + m - rate * t[j] - burst);
  }
  return best;
}

/// The most admissions in any window (a - w, a] of the sorted times (seconds).
inline std::size_t max_in_window(std::vector<double> t, double w) {
  std::sort(t.begin(), t.end());
  std::size_t best = 0, i = 0;
  for (std::size_t j = 0; j < t.size(); ++j) {
    while (t[j] - t[i] >= w) ++i;
    best = std::max(best, j - i + 1);
  }
  return best;
}

inline std::vector<double> seconds_of_ns(const std::vector<std::int64_t>& v) {
  std::vector<double> s;
  s.reserve(v.size());
  for (auto x : v) s.push_back(static_cast<double>(x) / 1e9);
  return s;
}
inline std::vector<double> seconds_of_us(const std::vector<std::int64_t>& v) {
  std::vector<double> s;
  s.reserve(v.size());
  for (auto x : v) s.push_back(static_cast<double>(x) / 1e6);
  return s;
}

}  // namespace rc::test
