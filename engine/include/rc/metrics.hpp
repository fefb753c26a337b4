// Operational counters, kept where the numbers arise and read only when someone asks.
//
// The engine counts; it does not format. A gate keeps its gate_counters next to its state and
// bumps them where it decides (under the lock it holds for the decision anyway, so a bump there
// is a plain load and store, no locked instruction), and once more after a wait. A route already
// knows its exchanges in flight. context::snapshot() reads all of it into plain values when asked
// (a scrape): no map lookup, lock, allocation or event subscription per exchange. Rendering (the
// Prometheus text format of http_source's /metrics) lives in components/ (rc/prometheus.hpp).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rc/time.hpp"

namespace rc {

/// Upper bounds, in seconds, of the gate wait histogram's buckets (+Inf follows). 0 holds the
/// exchanges admitted without waiting.
inline constexpr std::array<double, 15> gate_wait_bounds{0,   0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                         0.5, 1,     2.5,   5,    10,    30,   60};

/// A histogram as read: cumulative counts per bound of `bounds` (`le`), then all of them (+Inf).
struct histogram_snapshot {
  std::vector<double> bounds;
  std::vector<std::uint64_t> cumulative;  // one per bound
  std::uint64_t count = 0;                // the +Inf bucket
  double sum = 0;                         // seconds
};

/// One gate's counts since the route was built.
struct gate_snapshot {
  std::string id;              // "throttle#1"
  std::string kind;            // "throttle", "slowDown", "rateLimit"
  std::string label;           // the gate's `label` option, may be empty
  std::uint64_t passed = 0;    // admitted, after a wait or not
  std::uint64_t delayed = 0;   // made to wait (counted in passed too once admitted)
  std::uint64_t rejected = 0;  // refused (RC5013)
  histogram_snapshot waits;    // the wait of every admitted exchange; count == passed
};

struct route_snapshot {
  std::string id;
  bool started = false;       // its source has started (route:started)
  std::size_t in_flight = 0;  // exchanges being processed (route_runtime::in_flight)
  std::vector<gate_snapshot> gates;
};

struct context_snapshot {
  bool started = false;   // start() was called
  bool stopping = false;  // stop() was called
  bool ready = false;     // started, not stopping, and every route started
  std::vector<route_snapshot> routes;
};

/// One count, bumped by a single writer at a time (under a lock) and read at any time: a relaxed
/// load and store, which cost a plain increment.
class locked_count {
 public:
  void bump_locked() noexcept { n_.store(n_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  std::uint64_t value() const noexcept { return n_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> n_{0};
};

/// A gate's counters. The *_locked bumps are for a single writer at a time (the gate's decision
/// lock), as locked_count's. Readers may read at any time.
class gate_counters {
 public:
  void passed_locked() noexcept { passed_now_.bump_locked(); }
  void delayed_locked() noexcept { delayed_.bump_locked(); }
  void rejected_locked() noexcept { rejected_.bump_locked(); }
  /// Admitted after waiting `waited` (outside any lock: a waiting exchange is no hot path).
  void passed_after(duration waited) noexcept {
    const double s = std::chrono::duration<double>(waited).count();
    std::size_t i = 0;
    while (i < gate_wait_bounds.size() && s > gate_wait_bounds[i]) ++i;
    waited_[i].fetch_add(1, std::memory_order_relaxed);
    const auto ns = waited.count() > 0 ? static_cast<std::uint64_t>(waited.count()) : 0;
    wait_ns_.fetch_add(ns, std::memory_order_relaxed);
  }

  /// The counts as now; id, kind and label are the caller's to fill.
  /// passed_elsewhere: admissions without a wait that the caller counted itself rather than with
  /// passed_locked() (a gate that keeps that count in the cache line of its lock).
  gate_snapshot read(std::uint64_t passed_elsewhere = 0) const {
    gate_snapshot g;
    const std::uint64_t now = passed_now_.value() + passed_elsewhere;
    g.delayed = delayed_.value();
    g.rejected = rejected_.value();
    g.waits.bounds.assign(gate_wait_bounds.begin(), gate_wait_bounds.end());
    g.waits.cumulative.reserve(gate_wait_bounds.size());
    std::uint64_t running = now;  // admitted at once: no wait, in every bucket
    for (std::size_t i = 0; i < gate_wait_bounds.size(); ++i) {
      running += waited_[i].load(std::memory_order_relaxed);
      g.waits.cumulative.push_back(running);
    }
    running += waited_[gate_wait_bounds.size()].load(std::memory_order_relaxed);
    g.waits.count = running;
    g.waits.sum = static_cast<double>(wait_ns_.load(std::memory_order_relaxed)) / 1e9;
    g.passed = running;
    return g;
  }

  /// Adds these counts to `g`, a read() of counters kept in parts (a split table's).
  void add_to(gate_snapshot& g, std::uint64_t passed_elsewhere = 0) const {
    const gate_snapshot mine = read(passed_elsewhere);
    g.passed += mine.passed;
    g.delayed += mine.delayed;
    g.rejected += mine.rejected;
    for (std::size_t i = 0; i < mine.waits.cumulative.size() && i < g.waits.cumulative.size(); ++i)
      g.waits.cumulative[i] += mine.waits.cumulative[i];
    g.waits.count += mine.waits.count;
    g.waits.sum += mine.waits.sum;
  }

 private:
  locked_count passed_now_;  // admitted without a wait
  locked_count delayed_;
  locked_count rejected_;
  std::array<std::atomic<std::uint64_t>, gate_wait_bounds.size() + 1> waited_{};  // by bucket; last: > 60 s
  std::atomic<std::uint64_t> wait_ns_{0};
};

}  // namespace rc
