// rc-sim outputs: the table (stdout), CSV and JSON. All written by hand with integer nanosecond
// arithmetic (scenario.hpp's format_ms), streamed so a million requests need no document in
// memory, and byte-identical from run to run.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "runner.hpp"
#include "scenario.hpp"

namespace rc::sim {

struct gate_summary {
  std::uint64_t passes = 0;
  std::uint64_t delayed = 0;
  std::uint64_t rejected = 0;
  std::uint64_t abandoned = 0;
  duration max_wait{};
};

struct summary {
  std::uint64_t requests = 0;
  std::uint64_t served = 0;
  std::uint64_t refused = 0;
  std::uint64_t abandoned = 0;
  std::uint64_t failed = 0;
  // Wait = time a request spent waiting in gates (the service time is not a wait).
  duration max_wait{};
  duration p50_wait{};
  duration p99_wait{};
  time_point last_end{};            // the last response (abandoned requests got none)
  std::vector<gate_summary> gates;  // per scenario gate
};

summary summarize(const scenario& s, const run_report& r);

/// summarize() one request at a time, in any order: what rc-sim uses when it keeps no
/// per-request report (--quiet, no output file).
class summary_builder {
 public:
  explicit summary_builder(const scenario& s);
  void reserve(std::size_t n) { waits_.reserve(n); }
  void add(const request_result& q);
  summary finish(std::uint64_t requests);

 private:
  const scenario& s_;
  summary sum_;
  std::vector<duration> waits_;
  std::uint64_t added_ = 0;
};

/// "served 5, refused 2, abandoned 1; wait max 25000ms, p50 1000ms, p99 25000ms"
std::string summary_line(const summary& sum);

void write_table(std::ostream& out, const scenario& s, const run_report& r, const summary& sum, bool rows);
void write_csv(std::ostream& out, const scenario& s, const run_report& r);
void write_json(std::ostream& out, const scenario& s, const run_report& r, const summary& sum);

}  // namespace rc::sim
