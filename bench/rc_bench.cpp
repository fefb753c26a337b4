// rc-bench: end-to-end figures for the engine, one scenario per run.
//
//   rc-bench --scenario NAME [--n N] [--max-keys K] [--threads T] [--timer-lead-us U]
//            [--timer-race on|off] [--tsc-clock on|off]
//
// Prints one JSON object: scenario, n, threads, seconds, per_second, peak_rss_mb, cpu_seconds,
// plus the scenario's own figures. Every scenario runs on a real-time context (steady clock, T
// worker threads, 1 by default); the calling thread only starts, drains and stops it. `seconds` runs from start() to
// the end of drain() (stop() for inflight): it includes the source, not building the route or
// its values. Memory figures are resident-set deltas against a baseline taken just before
// start(), so they include allocator slack: what a user would see, not what the engine asked for.
// On a shared machine, take the median of several runs and quote the load; pacing also reports
// how late a bare OS timer wakes on the same machine (os_timer_*), the floor for its lateness.
//
// Scenarios (issue 2, item 13):
//   plain_seq      N exchanges sequence -> transform -> noop, one in flight at a time
//   plain_burst    the same from simple(): all N started at once
//   throttle_open  plain_seq with a step throttle that never paces
//   throttle_reject  plain_seq with a step throttle in reject mode after the transform, refusing all
//                  but the first: what a refusal costs when nobody reads its error (a flood
//                  turned away); `refused` is the gate's count
//   retry_open     plain_seq with a step retry that never fails
//   timeout_open   plain_seq with a step timeout (1 h) that is never hit
//   timeout_route_open  plain_seq under a route-scope timeout (1 h): a deadline armed per run
//   concurrency_open    plain_seq with a step bulkhead whose max is never reached
//   breaker_open   plain_seq with a step circuit breaker held open: every call gets the fallback
//   breaker_fast_fail  breaker_open's breaker after the transform and with no fallback: every call
//                  after the first fails fast (RC5025), nobody reads the errors
//   cache_hit      plain_seq with a step cache whose one key always hits (in-memory provider)
//   delay0         N (200,000) in flight through delay(0ms); bytes per waiting exchange
//   pacing         N (3,000) at once through rate 1000/s burst 1, real time: window and lateness
//                  against each admission's slot (see pacing())
//   inflight       N (100,000) paced at 10/s, stop requested after 2 s: memory, stop latency
//   keys           N (1,000,000) distinct keys through a keyed throttle; bytes per key
//   keys_burst     the same, all N started at once (simple()): what several threads share
//   events         throttle_open plus one subscriber that receives every route:throttle:passed
//                  (the original's g-events-seq); it counts them and reads nothing else. Five
//                  runs, each beside a throttle_open run of N in the same process (alternating
//                  which goes first): per_second is the median events run's, over_throttle_open
//                  the median of the five pairs' time per exchange, events over throttle_open
//   split_aggregate N exchanges sequence -> split into 10 children -> transform (per child) ->
//                  aggregate -> transform (sum) -> noop; ns per parent and per child
//   choice         plain_seq with a choice of 3 branches (v%3 == 0, v%3 == 1, otherwise), each a
//                  transform, before the noop: selection and branch run per exchange
//   dedupe         plain_seq through dedupe (default key, every body distinct, max_keys 100,000)
//   batch          plain_seq through batch({.size = 100}) to a function counting the items
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <rc/rc.hpp>
#include <rc/tsc_clock.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "timer_lateness.hpp"

namespace {

using namespace std::chrono_literals;
using wall = std::chrono::steady_clock;

double seconds_since(wall::time_point t0) { return std::chrono::duration<double>(wall::now() - t0).count(); }

/// Peak resident set of the process so far, MiB (getrusage: KiB on Linux).
double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

/// CPU time of the whole process so far (all threads, user + system), seconds.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

/// Current resident set, MiB (VmRSS from /proc/self/status).
double rss_mb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  return 0;
}

std::vector<int> iota_values(std::size_t n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

/// Worker threads of every scenario's context (--threads), its timer_lead (--timer-lead-us),
/// timer_race (--timer-race on) and tsc_clock (--tsc-clock off).
unsigned bench_threads = 1;
rc::duration bench_timer_lead{};
bool bench_timer_race = false;
bool bench_tsc_clock = true;

rc::context_options bench_options() {
  return rc::context_options{.threads = bench_threads,
                             .timer_lead = bench_timer_lead,
                             .timer_race = bench_timer_race,
                             .tsc_clock = bench_tsc_clock};
}

/// A count bumped from the worker threads. Each thread has its own cache line (a shared counter
/// would make two threads fight over one line on every exchange); the total is read after
/// drain() or stop(), which every worker's last decrement of the context's work counter
/// happens-before.
class tally {
 public:
  tally() : id_(next_id()), one_thread_(bench_threads == 1) {}
  tally(const tally&) = delete;
  tally& operator=(const tally&) = delete;

  [[gnu::always_inline]] void operator++() {
    if (one_thread_) [[likely]] {  // a plain count, as before --threads existed: inlined, so
      ++count_;                    // the one-thread figures measure the engine, not the tally
      return;
    }
    bump_shared();
  }
  std::size_t total() const {
    std::lock_guard lock(mutex_);
    std::size_t sum = count_;
    for (const auto& c : cells_) sum += c->n;
    return sum;
  }

 private:
  [[gnu::noinline]] void bump_shared() {
    // The last tally this thread bumped, in plain thread-locals (no initialisation guard).
    thread_local std::uint64_t last_id = 0;
    thread_local cell* last = nullptr;
    if (last_id != id_) {
      last = &cell_for_this_thread();
      last_id = id_;
    }
    ++last->n;
  }

  struct alignas(64) cell {
    std::size_t n = 0;
  };
  static std::uint64_t next_id() {
    static std::atomic<std::uint64_t> ids{1};
    return ids.fetch_add(1);
  }
  cell& cell_for_this_thread() {
    // A thread counts for at most a few tallies (split_aggregate has two): a short list.
    thread_local std::vector<std::pair<std::uint64_t, cell*>> mine;
    for (auto& [id, c] : mine)
      if (id == id_) return *c;
    std::lock_guard lock(mutex_);
    cells_.push_back(std::make_unique<cell>());
    mine.emplace_back(id_, cells_.back().get());
    return *cells_.back();
  }

  std::uint64_t id_;
  bool one_thread_;
  std::size_t count_ = 0;  // one thread: the only count
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<cell>> cells_;
};

struct run_config {
  std::size_t n;
  std::size_t max_keys;
};

/// What a scenario reports: the common figures plus its own.
struct result {
  double seconds = 0;
  nlohmann::json figures = nlohmann::json::object();
};

/// Starts the context, waits for every exchange, returns the seconds it took.
double run_to_idle(rc::context& ctx) {
  const auto t0 = wall::now();
  ctx.start();
  ctx.drain();
  const double s = seconds_since(t0);
  ctx.stop();
  return s;
}

// ---- throughput: one route, synchronous steps or wrappers that never wait -----------------------

enum class wrap {
  none,
  throttle,
  throttle_reject,
  retry,
  timeout,
  timeout_route,
  concurrency,
  breaker_open,
  breaker_fast_fail,
  cache_hit
};

/// sequence (or simple) -> [wrapper] transform -> noop. The transform counts, so a run that lost
/// exchanges shows in `completed`.
template <class Source>
result throughput(std::size_t n, Source make_source, wrap w, bool subscriber = false) {
  rc::context ctx(bench_options());
  tally completed;
  auto route = rc::craft().id("bench").from(make_source(iota_values(n)));
  auto count = [&completed](int v) {
    ++completed;
    return v + 1;
  };
  switch (w) {
    case wrap::none:
      ctx.add(std::move(route).transform(count).to(rc::noop()));
      break;
    case wrap::throttle:
      // burst = rate = 1e12/s: the bucket never runs dry, so every decision admits at once.
      ctx.add(std::move(route).throttle({.rate = 1e12}).transform(count).to(rc::noop()));
      break;
    case wrap::throttle_reject:
      // One token an hour in reject mode: the first exchange passes, every later one is refused
      // (RC5013), its error made, carried to the route's end and let go, read by nobody. The
      // transform counts before the throttle: `completed` is every exchange that reached it, and
      // the gate's own count says how many it refused.
      ctx.add(std::move(route)
                  .transform(count)
                  .throttle({.rate = 1, .per = rc::per::hour, .mode = rc::throttle_mode::reject})
                  .to(rc::noop()));
      break;
    case wrap::retry:
      ctx.add(std::move(route).retry({.max_attempts = 3}).transform(count).to(rc::noop()));
      break;
    case wrap::timeout:
      ctx.add(std::move(route).timeout(std::chrono::hours(1)).transform(count).to(rc::noop()));
      break;
    case wrap::timeout_route:
      ctx.add(rc::craft()
                  .id("bench")
                  .timeout(std::chrono::hours(1))
                  .from(make_source(iota_values(n)))
                  .transform(count)
                  .to(rc::noop()));
      break;
    case wrap::concurrency:
      ctx.add(std::move(route).concurrency({.max = 1'000'000}).transform(count).to(rc::noop()));
      break;
    case wrap::breaker_open: {
      // The first call fails and opens the breaker for an hour: every later call is refused and
      // the fallback's body goes on to noop. Measures the refusal path (lock, state check, fallback).
      auto fail_first = [&completed, first = std::make_shared<std::atomic<bool>>(true)](int v) {
        if (first->exchange(false)) throw std::runtime_error("down");
        ++completed;
        return v + 1;
      };
      ctx.add(std::move(route)
                  .circuit_breaker({.failure_threshold = 1,
                                    .cooldown = std::chrono::hours(1),
                                    .fallback = [&completed](rc::exchange&) -> rc::recovery {
                                      ++completed;
                                      return 0;
                                    }})
                  .transform(fail_first)
                  .to(rc::noop()));
      break;
    }
    case wrap::breaker_fast_fail: {
      // As breaker_open without a fallback: every call after the first fails fast with RC5025,
      // its error made, carried to the route's end and let go, read by nobody (an outage's flood).
      auto fail_first = [first = std::make_shared<std::atomic<bool>>(true)](int v) {
        if (first->exchange(false)) throw std::runtime_error("down");
        return v + 1;
      };
      // The transform counts before the breaker: `completed` is every exchange that reached it.
      ctx.add(std::move(route)
                  .transform(count)
                  .circuit_breaker({.failure_threshold = 1, .cooldown = std::chrono::hours(1)})
                  .transform(fail_first)
                  .to(rc::noop()));
      break;
    }
    case wrap::cache_hit:
      // One key: the first exchange stores, every later one hits the in-memory provider.
      ctx.add(std::move(route)
                  .cache({.key = [](const rc::exchange&) { return std::string("k"); }})
                  .transform(count)
                  .to(rc::noop()));
      break;
  }
  tally seen;
  rc::subscription sub;
  if (subscriber) sub = ctx.on("route:throttle:passed", [&seen](const rc::event&) { ++seen; });

  result r;
  r.seconds = run_to_idle(ctx);
  r.figures["completed"] = completed.total();
  r.figures["ns_per_exchange"] = r.seconds * 1e9 / static_cast<double>(n);
  if (w == wrap::throttle_reject) r.figures["refused"] = ctx.snapshot().routes.at(0).gates.at(0).rejected;
  if (subscriber) r.figures["events_seen"] = seen.total();
  return r;
}

template <class T>
rc::simple_source<T> seq_source(std::vector<T> v) {
  return rc::sequence(std::move(v));
}
template <class T>
rc::simple_source<T> burst_source(std::vector<T> v) {
  return rc::simple(std::move(v));
}

result plain_seq(const run_config& c) { return throughput(c.n, seq_source<int>, wrap::none); }
result plain_burst(const run_config& c) { return throughput(c.n, burst_source<int>, wrap::none); }
result throttle_open(const run_config& c) { return throughput(c.n, seq_source<int>, wrap::throttle); }
result throttle_reject(const run_config& c) { return throughput(c.n, seq_source<int>, wrap::throttle_reject); }
result retry_open(const run_config& c) { return throughput(c.n, seq_source<int>, wrap::retry); }
result timeout_open(const run_config& c) { return throughput(c.n, seq_source<int>, wrap::timeout); }
result timeout_route_open(const run_config& c) { return throughput(c.n, seq_source<int>, wrap::timeout_route); }
result concurrency_open(const run_config& c) { return throughput(c.n, seq_source<int>, wrap::concurrency); }
result breaker_open(const run_config& c) { return throughput(c.n, seq_source<int>, wrap::breaker_open); }
result breaker_fast_fail(const run_config& c) { return throughput(c.n, seq_source<int>, wrap::breaker_fast_fail); }
result cache_hit(const run_config& c) { return throughput(c.n, seq_source<int>, wrap::cache_hit); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size();
  return m % 2 == 1 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2;
}

// events beside throttle_open in one process: separate processes a fraction of a second long
// read their ratio anywhere from 0.9 to 1.6 on a virtual machine whose speed drifts from second
// to second, while runs next to each other drift together. Each run is the full N (shorter ones
// read slower: the route's first exchanges warm it). `seconds` is the median events run's.
result events(const run_config& c) {
  constexpr std::size_t pairs = 5;
  std::vector<double> events_s, open_s, ratios;
  // The fewest of any run: a run that lost exchanges (or events) shows.
  auto completed = std::numeric_limits<std::size_t>::max(), seen = completed;
  for (std::size_t i = 0; i < pairs; ++i) {
    const auto run_open = [&] { return throughput(c.n, seq_source<int>, wrap::throttle); };
    const auto run_events = [&] { return throughput(c.n, seq_source<int>, wrap::throttle, true); };
    result open, ev;
    if (i % 2 == 0) {
      open = run_open();
      ev = run_events();
    } else {
      ev = run_events();
      open = run_open();
    }
    events_s.push_back(ev.seconds);
    open_s.push_back(open.seconds);
    ratios.push_back(ev.seconds / open.seconds);
    completed =
        std::min({completed, ev.figures["completed"].get<std::size_t>(), open.figures["completed"].get<std::size_t>()});
    seen = std::min(seen, ev.figures["events_seen"].get<std::size_t>());
  }
  result r;
  r.seconds = median(events_s);
  r.figures["completed"] = completed;
  r.figures["events_seen"] = seen;
  r.figures["ns_per_exchange"] = r.seconds * 1e9 / static_cast<double>(c.n);
  r.figures["throttle_open_per_second"] = static_cast<double>(c.n) / median(open_s);
  r.figures["over_throttle_open"] = median(ratios);
  r.figures["pairs"] = pairs;
  return r;
}

// ---- split_aggregate: each exchange split into 10 children and joined back ---------------------

result split_aggregate(const run_config& c) {
  constexpr int fan_out = 10;
  rc::context ctx(bench_options());
  tally completed;  // parents
  tally children;
  ctx.add(rc::craft()
              .id("split_aggregate")
              .from(seq_source(iota_values(c.n)))
              .split([](const int& v) {
                std::vector<int> lines(fan_out);
                std::iota(lines.begin(), lines.end(), v);
                return lines;
              })
              .transform([&children](int v) {
                ++children;
                return v * 2;
              })
              .aggregate()
              .transform([&completed](std::vector<int> v) {
                ++completed;
                return std::accumulate(v.begin(), v.end(), 0LL);
              })
              .to(rc::noop()));
  result r;
  r.seconds = run_to_idle(ctx);
  r.figures["completed"] = completed.total();
  r.figures["children"] = children.total();
  r.figures["ns_per_exchange"] = r.seconds * 1e9 / static_cast<double>(c.n);
  r.figures["ns_per_child"] = r.seconds * 1e9 / static_cast<double>(c.n * fan_out);
  return r;
}

// ---- choice: plain_seq with a 3-branch choice before the noop -----------------------------------

result choice(const run_config& c) {
  rc::context ctx;
  std::size_t completed = 0;  // worker thread only; read after drain()
  ctx.add(rc::craft()
              .id("choice")
              .from(seq_source(iota_values(c.n)))
              .choice(rc::when([](const int& v) { return v % 3 == 0; },
                               rc::branch<int>().transform([](int v) { return v + 1; })),
                      rc::when([](const int& v) { return v % 3 == 1; },
                               rc::branch<int>().transform([](int v) { return v + 2; })),
                      rc::otherwise(rc::branch<int>().transform([](int v) { return v + 3; })))
              .transform([&completed](int v) {
                ++completed;
                return v;
              })
              .to(rc::noop()));
  result r;
  r.seconds = run_to_idle(ctx);
  r.figures["completed"] = completed;
  r.figures["ns_per_exchange"] = r.seconds * 1e9 / static_cast<double>(c.n);
  return r;
}

// ---- dedupe / batch: the shaping steps on plain_seq ----------------------------------------------

result dedupe(const run_config& c) {
  rc::context ctx;
  std::size_t completed = 0;
  ctx.add(rc::craft()
              .id("dedupe")
              .from(seq_source(iota_values(c.n)))
              .dedupe({.max_keys = 100'000})  // default key: the body's hash; all distinct, the table full after 100k
              .to([&completed](int&) { ++completed; }));
  result r;
  r.seconds = run_to_idle(ctx);
  r.figures["completed"] = completed;
  r.figures["ns_per_exchange"] = r.seconds * 1e9 / static_cast<double>(c.n);
  return r;
}

result batch(const run_config& c) {
  constexpr std::size_t size = 100;
  rc::context ctx;
  std::size_t completed = 0;  // items delivered in batches
  std::size_t batches = 0;
  ctx.add(rc::craft()
              .id("batch")
              .from(seq_source(iota_values(c.n)))
              .batch({.size = size, .flush_interval = 10ms})
              .to([&](std::vector<int>& b) {
                completed += b.size();
                ++batches;
              }));
  result r;
  r.seconds = run_to_idle(ctx);
  r.figures["completed"] = completed;
  r.figures["batches"] = batches;
  r.figures["ns_per_exchange"] = r.seconds * 1e9 / static_cast<double>(c.n);
  return r;
}

// ---- delay0: every exchange parked at once in delay(0ms) ----------------------------------------

/// Starts all its values before giving way once: simple() gives way every 128 starts (so that
/// timers run during a large batch), which would let the first exchanges finish before the last
/// start. delay0 needs every exchange waiting at the same moment.
class all_at_once final : public rc::source<int> {
 public:
  explicit all_at_once(std::vector<int> values) : values_(std::move(values)) {}
  std::string_view adapter() const override { return "all-at-once"; }
  rc::task<void> run(rc::source_context& sc) override {
    for (int v : values_) sc.spawn(sc.make(v));
    co_return;
  }

 private:
  std::vector<int> values_;
};

result delay0(const run_config& c) {
  rc::context ctx(bench_options());
  tally completed;
  ctx.add(rc::craft()
              .id("delay0")
              .from(all_at_once(iota_values(c.n)))
              .delay(0ms)
              .transform([&completed](int v) {
                ++completed;
                return v + 1;
              })
              .to(rc::noop()));
  const double before = rss_mb();
  result r;
  r.seconds = run_to_idle(ctx);
  // The source parks all N in delay's yield before the first one resumes, so the peak is the
  // moment every exchange was waiting.
  const double grown_mb = peak_rss_mb() - before;
  r.figures["completed"] = completed.total();
  r.figures["ns_per_exchange"] = r.seconds * 1e9 / static_cast<double>(c.n);
  r.figures["rss_waiting_mb"] = grown_mb;
  r.figures["bytes_per_waiting"] = grown_mb * 1024 * 1024 / static_cast<double>(c.n);
  return r;
}

// ---- pacing: real-time accuracy of a throttle ---------------------------------------------------

/// The machine's floor: how late a bare timerfd wakes a sleeping thread for `slots` absolute
/// deadlines 1 ms apart, sorted, in microseconds. No engine code.
std::vector<double> os_timer_lateness_us(int slots) {
  std::vector<double> late =
      bench::timer_lateness_us(bench::monotonic_ns() + 1'000'000, 1'000'000, static_cast<std::size_t>(slots));
  std::sort(late.begin(), late.end());
  return late;
}

using bench::percentile;

result pacing(const run_config& c) {
  const std::vector<double> floor_us = os_timer_lateness_us(1000);
  constexpr double rate = 1000;  // per second
  constexpr double burst = 1;
  rc::context ctx(bench_options());
  std::mutex mutex;  // with several threads, steps run on any of them (1000/s: no contention)
  std::optional<rc::time_point> first_arrival;
  std::vector<rc::time_point> admitted;
  std::vector<rc::time_point> decided;  // the throttle's own clock at each pass (its passed event)
  admitted.reserve(c.n);
  decided.reserve(c.n);
  auto sub = ctx.on("route:throttle:passed", [&](const rc::event& e) {
    if (const auto* g = e.get<rc::gate_event>()) {
      std::lock_guard lock(mutex);
      decided.push_back(g->passed_at);
    }
  });
  ctx.add(rc::craft()
              .id("pacing")
              .from(rc::simple(iota_values(c.n)))
              .process([&](rc::exchange&) {
                std::lock_guard lock(mutex);
                if (!first_arrival) first_arrival = ctx.now();
              })
              .throttle({.rate = rate, .burst = burst})
              .to([&](int&) {
                std::lock_guard lock(mutex);
                admitted.push_back(ctx.now());
              }));
  result r;
  r.seconds = run_to_idle(ctx);

  // Each admission's slot: one interval after the previous slot, the first at first_arrival.
  // Nobody may be early; lateness is how far behind its slot the step actually ran. A stall of
  // the process (a VM pause) makes the throttle move its schedule later by the whole intervals
  // lost rather than admit the missed slots in a burst, so the slot model does the same: an
  // admission a whole interval or more behind its slot moves the slots from there on. The
  // throttle judges that when it wakes, the step records the time a little later: an admission
  // just under a whole interval late to the throttle can be just over it here. Moving the slots
  // then would put every later slot an interval after the throttle's, and their admissions would
  // read as early (a negative p50, a p99 too small), so a move is trusted only as far as the
  // admissions allow: none is half an interval or more before its slot. The fixed
  // schedule first_arrival + k / rate is reported too: no limiter that keeps burst + rate * t
  // can meet it once a stall has cost it slots.
  const double interval_us = 1e6 / rate;
  const auto at_us = [&](std::size_t k) {
    return std::chrono::duration<double, std::micro>(admitted[k] - *first_arrival).count();
  };
  std::vector<double> late_us;
  std::vector<double> fixed_late_us;
  late_us.reserve(admitted.size());
  fixed_late_us.reserve(admitted.size());
  double slot_us = 0;
  std::size_t moves = 0;
  for (std::size_t k = 0; k < admitted.size(); ++k) {
    if (k > 0) slot_us += interval_us;
    if (const double behind = at_us(k) - slot_us; behind >= interval_us) {
      double whole = std::floor(behind / interval_us);
      if (k + 1 < admitted.size() && at_us(k + 1) < slot_us + whole * interval_us + interval_us / 2) whole -= 1;
      slot_us += whole * interval_us;
      if (whole >= 1) ++moves;
    }
    // Moved too far at a stall the next admission did not show (two stalls in a row): back, as far
    // as the schedule had moved.
    while (at_us(k) < slot_us - interval_us / 2 && slot_us - interval_us >= static_cast<double>(k) * interval_us)
      slot_us -= interval_us;
    late_us.push_back(at_us(k) - slot_us);
    fixed_late_us.push_back(at_us(k) - static_cast<double>(k) * interval_us);
  }
  std::vector<double> sorted = late_us;
  std::sort(sorted.begin(), sorted.end());
  const auto pct = [&](double p) { return percentile(sorted, p); };
  std::sort(fixed_late_us.begin(), fixed_late_us.end());

  // The most passed in any closed 1 s window, and the worst excess over burst + rate * t for any
  // window [t_i, t_j] (t between two passes), at the times the throttle let each exchange on (the
  // bound it keeps). The same window over the times the next step ran (max_in_window_at_step)
  // can read one more: a stall between the pass and that step shifts one record, not the other.
  const auto most_in_1s = [](const std::vector<rc::time_point>& at) {
    std::size_t most = 0;
    for (std::size_t i = 0, j = 0; j < at.size(); ++j) {
      while (at[j] - at[i] > 1s) ++i;
      most = std::max(most, j - i + 1);
    }
    return most;
  };
  std::sort(decided.begin(), decided.end());  // several threads may record out of order
  const std::size_t max_in_window = most_in_1s(decided);
  double worst_excess = -1e300;
  for (std::size_t i = 0; i < decided.size(); ++i)
    for (std::size_t j = i; j < decided.size(); ++j) {
      const double t = std::chrono::duration<double>(decided[j] - decided[i]).count();
      worst_excess = std::max(worst_excess, static_cast<double>(j - i + 1) - (burst + rate * t));
    }

  r.figures["admitted"] = admitted.size();
  r.figures["rate"] = rate;
  r.figures["burst"] = burst;
  r.figures["passed"] = decided.size();
  r.figures["max_in_window"] = max_in_window;
  r.figures["max_in_window_at_step"] = most_in_1s(admitted);
  r.figures["window_bound"] = burst + rate * 1.0;
  r.figures["worst_window_excess"] = worst_excess;  // <= 0: burst + rate*t held for every window
  r.figures["min_lateness_us"] = sorted.front();
  r.figures["mean_lateness_us"] =
      std::accumulate(late_us.begin(), late_us.end(), 0.0) / static_cast<double>(late_us.size());
  r.figures["p50_lateness_us"] = pct(0.50);
  r.figures["p99_lateness_us"] = pct(0.99);
  r.figures["max_lateness_us"] = sorted.back();
  r.figures["schedule_moves"] = moves;  // stalls that cost the schedule whole intervals
  r.figures["schedule_moved_ms"] = (slot_us - static_cast<double>(admitted.size() - 1) * interval_us) / 1e3;
  r.figures["fixed_schedule_p99_lateness_us"] = percentile(fixed_late_us, 0.99);
  if (!floor_us.empty()) {
    r.figures["os_timer_p50_lateness_us"] = percentile(floor_us, 0.50);
    r.figures["os_timer_p99_lateness_us"] = percentile(floor_us, 0.99);
    r.figures["os_timer_max_lateness_us"] = floor_us.back();
  }
  return r;
}

// ---- inflight: a deep throttle backlog, then a graceful stop -----------------------------------

result inflight(const run_config& c) {
  rc::context ctx(bench_options());
  std::atomic<std::size_t> admitted{0};
  std::mutex mutex;                   // with several threads, steps run on any of them
  std::vector<rc::time_point> times;  // read after stop() joined the workers
  times.reserve(c.n);
  ctx.add(rc::craft().id("inflight").from(rc::simple(iota_values(c.n))).throttle({.rate = 10}).to([&](int&) {
    {
      std::lock_guard lock(mutex);
      times.push_back(ctx.now());
    }
    admitted.fetch_add(1, std::memory_order_relaxed);
  }));
  const double before = rss_mb();
  const auto t0 = wall::now();
  ctx.start();
  std::this_thread::sleep_for(2s);
  const double waiting_mb = rss_mb() - before;
  const std::size_t admitted_before_stop = admitted.load();
  const std::size_t waiting = c.n - admitted_before_stop;

  const rc::time_point requested = ctx.now();
  const auto stop_t0 = wall::now();
  const rc::stop_result sr = ctx.stop();
  const double stop_total_ms = seconds_since(stop_t0) * 1e3;

  result r;
  r.seconds = seconds_since(t0);
  // Stop "begins" when the first parked exchange is admitted because of it.
  const auto first_after = std::find_if(times.begin(), times.end(), [&](rc::time_point t) { return t >= requested; });
  r.figures["waiting_at_stop"] = waiting;
  r.figures["admitted_before_stop"] = admitted_before_stop;
  r.figures["admitted"] = admitted.load();
  r.figures["forced"] = sr.forced;
  r.figures["rss_waiting_mb"] = waiting_mb;
  r.figures["bytes_per_waiting"] = waiting_mb * 1024 * 1024 / static_cast<double>(waiting);
  r.figures["stop_ms"] =
      first_after == times.end() ? nlohmann::json(nullptr) : nlohmann::json(rc::to_ms(*first_after - requested));
  r.figures["stop_total_ms"] = stop_total_ms;
  return r;
}

// ---- keys: one new key per exchange -------------------------------------------------------------

result keyed(const run_config& c, bool burst) {
  rc::context ctx(bench_options());
  tally completed;
  std::vector<int> values = iota_values(c.n);
  // Before the route joins (the source's values made already): a split table (several threads)
  // sizes its parts' indexes then.
  const double before = rss_mb();
  ctx.add(rc::craft()
              .id("keys")
              .from(burst ? rc::simple(std::move(values)) : rc::sequence(std::move(values)))
              // 1000/s: a bucket that took one token is full again (evictable) after 1 ms.
              .throttle({.rate = 1000,
                         .key = [](const rc::exchange& ex) { return "user-" + std::to_string(ex.body<int>()); },
                         .max_keys = c.max_keys})
              .transform([&completed](int v) {
                ++completed;
                return v + 1;
              })
              .to(rc::noop()));
  result r;
  r.seconds = run_to_idle(ctx);
  const double grown_mb = rss_mb() - before;  // the table is still alive: the route owns it
  r.figures["completed"] = completed.total();
  r.figures["refused"] = c.n - completed.total();
  r.figures["max_keys"] = c.max_keys;
  r.figures["rss_table_mb"] = grown_mb;
  r.figures["bytes_per_key"] = grown_mb * 1024 * 1024 / static_cast<double>(std::min(c.n, c.max_keys));
  r.figures["ns_per_exchange"] = r.seconds * 1e9 / static_cast<double>(c.n);
  return r;
}

result keys(const run_config& c) { return keyed(c, false); }
result keys_burst(const run_config& c) { return keyed(c, true); }

struct scenario {
  std::string_view name;
  std::size_t default_n;
  result (*run)(const run_config&);
};

constexpr scenario scenarios[] = {
    {"plain_seq", 5'000'000, plain_seq},
    {"plain_burst", 5'000'000, plain_burst},
    {"throttle_open", 2'000'000, throttle_open},
    {"throttle_reject", 2'000'000, throttle_reject},
    {"retry_open", 2'000'000, retry_open},
    {"timeout_open", 2'000'000, timeout_open},
    {"timeout_route_open", 2'000'000, timeout_route_open},
    {"concurrency_open", 2'000'000, concurrency_open},
    {"breaker_open", 2'000'000, breaker_open},
    {"breaker_fast_fail", 2'000'000, breaker_fast_fail},
    {"cache_hit", 2'000'000, cache_hit},
    {"delay0", 200'000, delay0},
    {"pacing", 3'000, pacing},
    {"inflight", 100'000, inflight},
    {"keys", 1'000'000, keys},
    {"keys_burst", 1'000'000, keys_burst},
    {"split_aggregate", 500'000, split_aggregate},
    {"choice", 5'000'000, choice},
    {"events", 2'000'000, events},
    {"dedupe", 2'000'000, dedupe},
    {"batch", 2'000'000, batch},
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(
      stderr,
      "rc-bench: %s\nusage: rc-bench --scenario NAME [--n N] [--max-keys K] [--threads T] [--timer-lead-us U]\n"
      "                [--timer-race on|off] [--tsc-clock on|off]\n"
      "scenarios:",
      why);
  for (const auto& s : scenarios) std::fprintf(stderr, " %.*s", static_cast<int>(s.name.size()), s.name.data());
  std::fprintf(stderr, "\n");
  std::exit(2);
}

std::size_t parse_count(const char* text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || v == 0) usage("a count must be a positive integer");
  return static_cast<std::size_t>(v);
}

// "on" or "off"; anything else stops with `why`.
bool parse_on_off(std::string_view text, const char* why) {
  if (text != "on" && text != "off") usage(why);
  return text == "on";
}

}  // namespace

int main(int argc, char** argv) {
  std::string_view name;
  std::optional<std::size_t> n;
  std::size_t max_keys = rc::throttle_options::max_keys_limit;  // every key stays tracked
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 >= argc) usage("missing value");
    if (arg == "--scenario")
      name = argv[++i];
    else if (arg == "--n")
      n = parse_count(argv[++i]);
    else if (arg == "--max-keys")
      max_keys = parse_count(argv[++i]);
    else if (arg == "--threads")
      bench_threads = static_cast<unsigned>(std::min<std::size_t>(parse_count(argv[++i]), 256));
    else if (arg == "--timer-lead-us")
      bench_timer_lead = std::chrono::microseconds(parse_count(argv[++i]));
    else if (arg == "--timer-race")
      bench_timer_race = parse_on_off(argv[++i], "--timer-race takes on or off");
    else if (arg == "--tsc-clock")
      bench_tsc_clock = parse_on_off(argv[++i], "--tsc-clock takes on or off");
    else
      usage("unknown argument");
  }
  const auto it =
      std::find_if(std::begin(scenarios), std::end(scenarios), [&](const scenario& s) { return s.name == name; });
  if (it == std::end(scenarios)) usage(name.empty() ? "--scenario is required" : "unknown scenario");

  const run_config config{n.value_or(it->default_n), max_keys};
  try {
    const double cpu0 = cpu_seconds();
    result r = it->run(config);
    const double cpu = cpu_seconds() - cpu0;
    nlohmann::json out = {{"scenario", it->name},
                          {"n", config.n},
                          {"threads", bench_threads},
                          {"timer_lead_us", std::chrono::duration<double, std::micro>(bench_timer_lead).count()},
                          {"timer_race", bench_timer_race},
                          {"tsc_clock", bench_tsc_clock && rc::detail::tsc_clock::usable()},
                          {"seconds", r.seconds},
                          {"per_second", static_cast<double>(config.n) / r.seconds},
                          {"peak_rss_mb", peak_rss_mb()},
                          // CPU of the whole run (building the route included): steadier than
                          // `seconds` on a shared machine.
                          {"cpu_seconds", cpu}};
    for (auto& [k, v] : r.figures.items()) out[k] = v;
    std::printf("%s\n", out.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rc-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
