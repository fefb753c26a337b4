// Runs a scenario through the engine's real gates in virtual time and records what happened to
// every request.
//
// The route is built with the DSL (rc::craft()), exactly as a user would: route-scope gates before
// from() in list order (a route-scope retry becomes the route's retry segment), then the
// step-scope gates, first listed outermost, around one `service` step that waits service_ms.
// Traffic comes from a source that sleeps on the manual clock until each arrival; a request
// carries its key as routecraft.client (rc::by_client()), its other headers, its client timeout
// as the exchange deadline plus an abort signal fired at arrival + timeout.
//
// What each gate did is read from the event bus (route:throttle:*, route:slowDown:*,
// route:rateLimit:*, route:retry:*, route:delay:*), the exchange's limit_notes() and the final
// error's details(): nothing here re-computes a gate's decision. An event names its gate by
// gateId ("throttle#2"), which the route assigns in declaration order; the runner knows the
// order it declared them in, so it maps ids to scenario gates without guessing from positions.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <rc/route.hpp>
#include <string>
#include <utility>
#include <vector>

#include "scenario.hpp"

namespace rc::sim {

enum class gate_outcome : std::uint8_t {
  passed,     // went through without waiting
  delayed,    // waited, then went through
  rejected,   // refused the request (RC5013)
  abandoned,  // the client left while waiting here
  retried,    // retry: succeeded after more than one attempt
  exhausted,  // retry: every attempt failed
  stopped,    // retry: stopped early (a failure not worth retrying, or the client left)
  served,     // service: answered
  failed,     // service: the downstream failed this attempt
};
std::string_view to_string(gate_outcome o) noexcept;

enum class request_outcome : std::uint8_t { served, refused, abandoned, failed };
std::string_view to_string(request_outcome o) noexcept;

/// The `gate` of the service's passes and segments (the downstream, after every gate).
inline constexpr std::uint16_t service_gate = 0xffff;

/// One passage through one gate (a retry can make a request pass a gate several times).
struct gate_pass {
  std::uint16_t gate = 0;  // index in scenario::gates, or service_gate
  gate_outcome outcome = gate_outcome::passed;
  std::uint64_t hit = 0;  // slow_down / rate_limit: hit number; retry: attempts; 0 = none
  time_point at{};        // when the gate saw the request
  duration wait{};
};

/// A stretch of time a request spent waiting in a gate, or being served.
struct segment {
  std::uint16_t gate = 0;  // index in scenario::gates, or service_gate
  time_point from{};
  time_point to{};
};

struct request_result {
  std::uint32_t id = 0;       // 1-based, arrival order
  std::uint32_t traffic = 0;  // index in scenario::traffic
  std::uint32_t key = 0;      // index in run_report::keys
  time_point arrival{};
  time_point ended{};  // responded (served, refused, failed) or gave up (abandoned)
  request_outcome outcome = request_outcome::served;
  int status = 0;  // HTTP-style status; 0 when nobody was answered
  std::optional<duration> retry_after;
  std::string reason;  // refused / failed: the error ("RC5013: ..."); abandoned: where
  std::vector<gate_pass> passes;
  std::vector<segment> segments;
  std::vector<std::pair<std::string, std::string>> headers;

  /// Time spent waiting in gates (being served is not waiting).
  duration total_wait() const noexcept;
};

/// A fixed window of a windowed gate, as the gate reported it (for the chart).
struct window_mark {
  std::uint16_t gate = 0;
  std::uint32_t key = 0;  // index in run_report::keys, or all_keys for an unkeyed gate
  time_point from{};
  time_point to{};
  static constexpr std::uint32_t all_keys = 0xffffffffU;
};

struct run_report {
  std::vector<std::string> keys;         // traffic keys, in order of first arrival
  std::vector<request_result> requests;  // arrival order
  std::vector<window_mark> windows;      // distinct fixed windows, in order of opening
  std::size_t request_count = 0;         // requests run (requests is empty unless kept)
  std::vector<std::uint16_t> chain;      // gate indices in the order a request meets them
  time_point finished{};                 // when the last request ended
};

/// Builds the scenario's route with the DSL and throws scenario_error (with the JSON path) when the
/// engine refuses an option. Used by run() and by itself as the validation step.
void check_scenario(const scenario& s);

struct run_options {
  /// Keep every request_result in run_report::requests (the table, CSV, JSON and chart read
  /// them). Off: only the requests in flight are held, each handed to on_finished and forgotten;
  /// what only those outputs read (segments, headers, windows) is not recorded.
  bool keep_requests = true;
  /// Called with each request as it ends (in order of ending, not of id).
  std::function<void(const request_result&)> on_finished;
};

/// Runs the scenario to completion in virtual time.
run_report run_scenario(const scenario& s, const run_options& o = {});

}  // namespace rc::sim
