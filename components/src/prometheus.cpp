// prometheus_text(): the engine's snapshot, the HTTP servers' counters and a few process figures
// as Prometheus text (exposition format 0.0.4). Runs only when called (a scrape): it may allocate
// and format freely. Every family is written whole (HELP, TYPE, then its samples), so a family
// never appears twice.
#include "rc/prometheus.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "http_internal.hpp"
#include "rc/context.hpp"
#include "rc/metrics.hpp"

namespace rc {
namespace {

using label = std::pair<std::string_view, std::string_view>;

// Label values: backslash, double quote and line feed are escaped; HELP text: backslash and
// line feed.
void escape(std::string& out, std::string_view v, bool quote) {
  for (const char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && quote)
      out += "\\\"";
    else
      out += c;
  }
}

class text_writer {
 public:
  explicit text_writer(std::string& out) : out_(out) {}

  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    escape(out_, help, false);
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }

  template <class V>
  void sample(std::string_view name, std::initializer_list<label> labels, V value, const label* extra = nullptr) {
    out_ += name;
    if (labels.size() > 0 || extra != nullptr) {
      out_ += '{';
      bool first = true;
      const auto put = [&](const label& l) {
        if (!first) out_ += ',';
        first = false;
        out_ += l.first;
        out_ += "=\"";
        escape(out_, l.second, true);
        out_ += '"';
      };
      for (const auto& l : labels) put(l);
      if (extra != nullptr) put(*extra);
      out_ += '}';
    }
    out_ += ' ';
    fmt::format_to(std::back_inserter(out_), "{}", value);
    out_ += '\n';
  }

 private:
  std::string& out_;
};

// Process figures from /proc (Linux); nothing when it cannot be read.
struct process_figures {
  double cpu_seconds = 0;
  double start_time_seconds = 0;
  std::uint64_t resident_bytes = 0;
  std::uint64_t open_fds = 0;
};

std::optional<process_figures> read_process() {
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (!stat || !std::getline(stat, line)) return std::nullopt;
  const auto paren = line.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(paren + 2));
  std::vector<std::string> f;  // f[0] is field 3 (state)
  for (std::string x; fields >> x;) f.push_back(std::move(x));
  if (f.size() < 22) return std::nullopt;
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const long page = ::sysconf(_SC_PAGESIZE);
  process_figures p;
  try {
    p.cpu_seconds = (std::stod(f[14 - 3]) + std::stod(f[15 - 3])) / ticks;
    p.resident_bytes = std::stoull(f[24 - 3]) * static_cast<std::uint64_t>(page);
    double boot = 0;
    std::ifstream sys("/proc/stat");
    for (std::string l; std::getline(sys, l);)
      if (l.rfind("btime ", 0) == 0) boot = std::stod(l.substr(6));
    p.start_time_seconds = boot + std::stod(f[22 - 3]) / ticks;
  } catch (...) {
    return std::nullopt;
  }
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec))
    ++p.open_fds;
  return p;
}

}  // namespace

std::string prometheus_text(context& ctx) {
  const context_snapshot s = ctx.snapshot();
  const std::vector<http_detail::listener_snapshot> listeners = http_detail::listener_snapshots(ctx);
  std::string out;
  out.reserve(4096);
  text_writer w(out);

  w.family("rc_ready", "gauge", "1 when the context has started, is not stopping and every route has started.");
  w.sample("rc_ready", {}, s.ready ? 1 : 0);

  w.family("rc_route_started", "gauge", "1 once the route's source has started.");
  for (const auto& r : s.routes) w.sample("rc_route_started", {{"route", r.id}}, r.started ? 1 : 0);
  w.family("rc_route_exchanges_in_flight", "gauge", "Exchanges of the route being processed now.");
  for (const auto& r : s.routes) w.sample("rc_route_exchanges_in_flight", {{"route", r.id}}, r.in_flight);

  // The gate families: one pass over the gates per family.
  const auto gates = [&](auto each) {
    for (const auto& r : s.routes)
      for (const auto& g : r.gates) each(r, g);
  };
  const auto gate_sample = [&](std::string_view name, const route_snapshot& r, const gate_snapshot& g, auto value,
                               const label* extra = nullptr) {
    w.sample(name, {{"route", r.id}, {"gate", g.id}, {"kind", g.kind}, {"label", g.label}}, value, extra);
  };
  w.family("rc_gate_passed_total", "counter", "Exchanges a gate admitted, after a wait or not.");
  gates([&](const auto& r, const auto& g) { gate_sample("rc_gate_passed_total", r, g, g.passed); });
  w.family("rc_gate_delayed_total", "counter",
           "Exchanges a gate made wait (each is counted in rc_gate_passed_total too once admitted).");
  gates([&](const auto& r, const auto& g) { gate_sample("rc_gate_delayed_total", r, g, g.delayed); });
  w.family("rc_gate_rejected_total", "counter", "Exchanges a gate refused (RC5013).");
  gates([&](const auto& r, const auto& g) { gate_sample("rc_gate_rejected_total", r, g, g.rejected); });
  w.family("rc_gate_wait_seconds", "histogram", "How long an admitted exchange waited in the gate (0: not at all).");
  gates([&](const auto& r, const auto& g) {
    for (std::size_t i = 0; i < g.waits.bounds.size(); ++i) {
      const std::string le = fmt::format("{}", g.waits.bounds[i]);
      const label l{"le", le};
      gate_sample("rc_gate_wait_seconds_bucket", r, g, g.waits.cumulative[i], &l);
    }
    const label inf{"le", "+Inf"};
    gate_sample("rc_gate_wait_seconds_bucket", r, g, g.waits.count, &inf);
    gate_sample("rc_gate_wait_seconds_sum", r, g, g.waits.sum);
    gate_sample("rc_gate_wait_seconds_count", r, g, g.waits.count);
  });

  w.family("rc_http_responses_total", "counter", "Responses an HTTP server sent, by status code.");
  for (const auto& l : listeners)
    for (const auto& [code, n] : l.responses) {
      const std::string c = std::to_string(code);
      w.sample("rc_http_responses_total", {{"listener", l.listener}, {"code", c}}, n);
    }
  w.family("rc_http_connections_open", "gauge", "Client connections an HTTP server holds open now.");
  for (const auto& l : listeners) w.sample("rc_http_connections_open", {{"listener", l.listener}}, l.connections);

  if (const auto p = read_process()) {
    w.family("process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.");
    w.sample("process_cpu_seconds_total", {}, p->cpu_seconds);
    w.family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    w.sample("process_resident_memory_bytes", {}, p->resident_bytes);
    w.family("process_open_fds", "gauge", "Open file descriptors.");
    w.sample("process_open_fds", {}, p->open_fds);
    w.family("process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch, in seconds.");
    w.sample("process_start_time_seconds", {}, p->start_time_seconds);
  }
  return out;
}

}  // namespace rc
