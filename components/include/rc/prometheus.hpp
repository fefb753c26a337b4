// The context's counters in the Prometheus text exposition format (version 0.0.4): what
// http_source serves at its `metrics_path`, and what a program exporting by other means can call.
//
// Layering: the engine counts and snapshots (rc/metrics.hpp, context::snapshot()); this renders
// that snapshot, the HTTP servers' own counters (responses by status, open connections) and a few
// process figures read from /proc. Nothing here runs per exchange: only when called.
// docs/http.md ("Metrics, health and readiness") lists every metric and its labels.
#pragma once

#include <string>
#include <string_view>

namespace rc {

class context;

/// The Content-Type of prometheus_text().
inline constexpr std::string_view prometheus_content_type = "text/plain; version=0.0.4; charset=utf-8";

/// Every metric of `ctx` as Prometheus text: HELP and TYPE before each family's samples, label
/// values escaped, counters ending in _total, histograms as _bucket{le}, _sum and _count.
std::string prometheus_text(context& ctx);

}  // namespace rc
