#include "report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

namespace rc::sim {
namespace {

/// What one request did in one gate, over all its passes (a retry can repeat a gate).
struct gate_cell {
  std::uint32_t passes = 0;
  std::uint64_t hit = 0;
  duration wait{};
  gate_outcome outcome = gate_outcome::passed;
  std::map<gate_outcome, std::uint32_t> tally;
};

std::vector<gate_cell> cells_of(const scenario& s, const request_result& r) {
  std::vector<gate_cell> cells(s.gates.size());
  for (const auto& p : r.passes) {
    if (p.gate >= s.gates.size()) continue;  // the service
    auto& c = cells[p.gate];
    ++c.passes;
    c.hit = p.hit;
    c.wait += p.wait;
    c.outcome = p.outcome;
    ++c.tally[p.outcome];
  }
  return cells;
}

std::string cell_text(const gate_spec& g, const gate_cell& c) {
  if (c.passes == 0) return "-";
  const bool repeated = c.passes > 1 && g.kind != gate_kind::retry;  // a retry around the gate
  std::vector<std::string> parts;
  if (g.kind == gate_kind::retry)
    parts.push_back(fmt::format("{} attempt{}", c.hit, c.hit == 1 ? "" : "s"));
  else if (c.hit > 0)
    parts.push_back(fmt::format("h{}", c.hit));
  if (c.wait > duration::zero()) parts.push_back(fmt::format("+{}", format_ms(c.wait)));
  if (repeated) {
    // How each pass went, in a fixed order.
    std::string tally;
    for (const auto& [o, n] : c.tally) tally += fmt::format("{}{} {}", tally.empty() ? "" : ", ", n, to_string(o));
    parts.push_back(fmt::format("x{} ({})", c.passes, tally));
  } else if (c.outcome != gate_outcome::passed && c.outcome != gate_outcome::delayed) {
    parts.emplace_back(to_string(c.outcome));
  } else if (parts.empty()) {
    parts.emplace_back("0");
  }
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : " ") + p;
  return out;
}

const std::string& key_text(const run_report& r, const request_result& q) { return r.keys[q.key]; }

std::string json_string(std::string_view s) { return nlohmann::json(s).dump(); }

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

/// Nearest-rank percentile of a list (sorted in place as needed).
duration percentile(std::vector<duration>& waits, double p) {
  if (waits.empty()) return {};
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * double(waits.size())));
  rank = std::clamp<std::size_t>(rank, 1, waits.size()) - 1;
  std::nth_element(waits.begin(), waits.begin() + std::ptrdiff_t(rank), waits.end());
  return waits[rank];
}

std::string chain_text(const scenario& s, const run_report& r) {
  std::string out;
  for (auto g : r.chain) out += fmt::format("{}[{}] -> ", s.gates[g].name, to_string(s.gates[g].scope));
  return out + fmt::format("service({}ms)", format_ms(s.service));
}

}  // namespace

summary_builder::summary_builder(const scenario& s) : s_(s) { sum_.gates.resize(s.gates.size()); }

void summary_builder::add(const request_result& q) {
  ++added_;
  switch (q.outcome) {
    case request_outcome::served:
      ++sum_.served;
      break;
    case request_outcome::refused:
      ++sum_.refused;
      break;
    case request_outcome::abandoned:
      ++sum_.abandoned;
      break;
    case request_outcome::failed:
      ++sum_.failed;
      break;
  }
  const duration w = q.total_wait();
  waits_.push_back(w);
  sum_.max_wait = std::max(sum_.max_wait, w);
  if (q.outcome != request_outcome::abandoned) sum_.last_end = std::max(sum_.last_end, q.ended);
  for (const auto& p : q.passes) {
    if (p.gate >= s_.gates.size()) continue;
    auto& g = sum_.gates[p.gate];
    ++g.passes;
    g.max_wait = std::max(g.max_wait, p.wait);
    if (p.wait > duration::zero()) ++g.delayed;
    if (p.outcome == gate_outcome::rejected) ++g.rejected;
    if (p.outcome == gate_outcome::abandoned) ++g.abandoned;
  }
}

summary summary_builder::finish(std::uint64_t requests) {
  // Every figure is a count, a maximum or a percentile: the order of add() does not matter.
  // Requests that never arrived (a run stopped early) count as a kept report has them: defaults.
  for (std::uint64_t i = added_; i < requests; ++i) add(request_result{});
  sum_.requests = requests;
  sum_.p50_wait = percentile(waits_, 50);
  sum_.p99_wait = percentile(waits_, 99);
  return std::move(sum_);
}

summary summarize(const scenario& s, const run_report& r) {
  summary_builder b(s);
  b.reserve(r.requests.size());
  for (const auto& q : r.requests) b.add(q);
  return b.finish(r.requests.size());
}

std::string summary_line(const summary& sum) {
  return fmt::format("served {}, refused {}, abandoned {}{}; wait max {}ms, p50 {}ms, p99 {}ms", sum.served,
                     sum.refused, sum.abandoned, sum.failed ? fmt::format(", failed {}", sum.failed) : std::string(),
                     format_ms(sum.max_wait), format_ms(sum.p50_wait), format_ms(sum.p99_wait));
}

void write_table(std::ostream& out, const scenario& s, const run_report& r, const summary& sum, bool rows) {
  const std::size_t n = std::max(r.request_count, r.requests.size());
  out << fmt::format("rc-sim: {} ({} request{})\n", s.name, n, n == 1 ? "" : "s");
  if (!s.description.empty()) out << s.description << "\n";
  out << "chain:  " << chain_text(s, r) << "\n";
  out << "times in ms; a gate cell reads: h<hit number> +<time waited> <outcome>\n\n";

  if (rows) {
    std::vector<std::string> head = {"id", "key", "arrival"};
    for (auto g : r.chain) head.push_back(s.gates[g].name);
    for (const char* h : {"outcome", "status", "retry-after", "responded"}) head.emplace_back(h);
    const std::size_t columns = head.size();
    const std::size_t first_gate = 3;

    auto row_of = [&](const request_result& q) {
      std::vector<std::string> row = {std::to_string(q.id), key_text(r, q).empty() ? "-" : key_text(r, q),
                                      format_ms(q.arrival)};
      const auto cells = cells_of(s, q);
      for (auto g : r.chain) row.push_back(cell_text(s.gates[g], cells[g]));
      row.emplace_back(to_string(q.outcome));
      row.push_back(q.status ? std::to_string(q.status) : "-");
      row.push_back(q.retry_after ? format_ms(*q.retry_after) : "-");
      row.push_back(q.outcome == request_outcome::abandoned ? "gave up " + format_ms(q.ended) : format_ms(q.ended));
      return row;
    };

    std::vector<std::size_t> width(columns);
    for (std::size_t c = 0; c < columns; ++c) width[c] = head[c].size();
    for (const auto& q : r.requests) {
      const auto row = row_of(q);
      for (std::size_t c = 0; c < columns; ++c) width[c] = std::max(width[c], row[c].size());
    }
    // Numbers right-aligned, words left-aligned.
    auto right = [&](std::size_t c) {
      return c == 0 || c == 2 || c == columns - 1 || c == columns - 2 || c == columns - 3;
    };
    auto emit = [&](const std::vector<std::string>& row) {
      std::string line;
      for (std::size_t c = 0; c < columns; ++c) {
        if (c > 0) line += c == first_gate || c == first_gate + s.gates.size() ? "  |  " : "  ";
        line += right(c) ? fmt::format("{:>{}}", row[c], width[c]) : fmt::format("{:<{}}", row[c], width[c]);
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out << line << "\n";
    };
    emit(head);
    for (const auto& q : r.requests) emit(row_of(q));
    out << "\n";
  }

  out << "summary: " << summary_line(sum) << "; last response " << format_ms(sum.last_end) << "ms\n";
  for (auto g : r.chain) {
    const auto& gs = sum.gates[g];
    out << fmt::format("  {} [{}]: {} passage{}, {} waited (max {}ms), {} rejected, {} abandoned\n", s.gates[g].name,
                       to_string(s.gates[g].scope), gs.passes, gs.passes == 1 ? "" : "s", gs.delayed,
                       format_ms(gs.max_wait), gs.rejected, gs.abandoned);
  }
}

void write_csv(std::ostream& out, const scenario& s, const run_report& r) {
  out << "id,key,arrival_ms";
  for (auto gi : r.chain) {
    const std::string n = csv_field(s.gates[gi].name);
    out << "," << n << "_hit," << n << "_wait_ms," << n << "_outcome";
  }
  out << ",wait_ms,outcome,status,retry_after_ms,responded_ms,gave_up_ms\n";
  for (const auto& q : r.requests) {
    std::string line = fmt::format("{},{},{}", q.id, csv_field(key_text(r, q)), format_ms(q.arrival));
    const auto cells = cells_of(s, q);
    for (auto g : r.chain) {
      const auto& c = cells[g];
      if (c.passes == 0)
        line += ",,,";
      else
        line += fmt::format(",{},{},{}", c.hit ? std::to_string(c.hit) : "", format_ms(c.wait), to_string(c.outcome));
    }
    const bool abandoned = q.outcome == request_outcome::abandoned;
    line += fmt::format(",{},{},{},{},{},{}", format_ms(q.total_wait()), to_string(q.outcome),
                        q.status ? std::to_string(q.status) : "", q.retry_after ? format_ms(*q.retry_after) : "",
                        abandoned ? "" : format_ms(q.ended), abandoned ? format_ms(q.ended) : "");
    out << line << "\n";
  }
}

void write_json(std::ostream& out, const scenario& s, const run_report& r, const summary& sum) {
  out << "{\n  \"scenario\": " << json_string(s.name) << ",\n  \"gates\": [";
  for (std::size_t p = 0; p < r.chain.size(); ++p) {
    const auto& g = s.gates[r.chain[p]];
    out << (p ? ", " : "")
        << fmt::format("{{\"gate\": \"{}\", \"label\": {}, \"scope\": \"{}\", \"key\": {}}}", to_string(g.kind),
                       json_string(g.name), to_string(g.scope),
                       g.key.from == key_spec::source::none ? "null" : json_string(g.key.text()));
  }
  out << "],\n  \"service_ms\": " << format_ms(s.service) << ",\n  \"requests\": [\n";
  for (std::size_t i = 0; i < r.requests.size(); ++i) {
    const auto& q = r.requests[i];
    std::string line = fmt::format("    {{\"id\": {}, \"key\": {}, \"arrival_ms\": {}, \"gates\": [", q.id,
                                   json_string(key_text(r, q)), format_ms(q.arrival));
    bool first = true;
    for (const auto& p : q.passes) {
      if (p.gate >= s.gates.size()) continue;
      const auto& g = s.gates[p.gate];
      line += first ? "" : ", ";
      first = false;
      line += fmt::format("{{\"gate\": \"{}\", \"label\": {}, \"hit\": {}, ", to_string(g.kind), json_string(g.name),
                          p.hit && g.kind != gate_kind::retry ? std::to_string(p.hit) : "null");
      if (g.kind == gate_kind::retry) line += fmt::format("\"attempts\": {}, ", p.hit);
      line += fmt::format("\"at_ms\": {}, \"wait_ms\": {}, \"outcome\": \"{}\"}}", format_ms(p.at), format_ms(p.wait),
                          to_string(p.outcome));
    }
    const bool abandoned = q.outcome == request_outcome::abandoned;
    line += fmt::format("], \"wait_ms\": {}, \"outcome\": \"{}\", \"status\": {}, \"responded_ms\": {}",
                        format_ms(q.total_wait()), to_string(q.outcome), q.status ? std::to_string(q.status) : "null",
                        abandoned ? "null" : format_ms(q.ended));
    if (abandoned) line += fmt::format(", \"gave_up_ms\": {}", format_ms(q.ended));
    if (q.retry_after) line += fmt::format(", \"retry_after_ms\": {}", format_ms(*q.retry_after));
    if (!q.reason.empty()) line += fmt::format(", \"reason\": {}", json_string(q.reason));
    line += ", \"headers\": {";
    for (std::size_t h = 0; h < q.headers.size(); ++h)
      line += fmt::format("{}{}: {}", h ? ", " : "", json_string(q.headers[h].first), json_string(q.headers[h].second));
    line += "}}";
    out << line << (i + 1 < r.requests.size() ? ",\n" : "\n");
  }
  out << "  ],\n  \"summary\": {";
  out << fmt::format(
      "\"requests\": {}, \"served\": {}, \"refused\": {}, \"abandoned\": {}, \"failed\": {}, \"max_wait_ms\": {}, "
      "\"p50_wait_ms\": {}, \"p99_wait_ms\": {}, \"last_response_ms\": {}, \"gates\": [",
      sum.requests, sum.served, sum.refused, sum.abandoned, sum.failed, format_ms(sum.max_wait),
      format_ms(sum.p50_wait), format_ms(sum.p99_wait), format_ms(sum.last_end));
  for (std::size_t p = 0; p < r.chain.size(); ++p) {
    const auto g = r.chain[p];
    const auto& gs = sum.gates[g];
    out << (p ? ", " : "")
        << fmt::format(
               "{{\"label\": {}, \"passages\": {}, \"waited\": {}, \"rejected\": {}, \"abandoned\": {}, "
               "\"max_wait_ms\": {}}}",
               json_string(s.gates[g].name), gs.passes, gs.delayed, gs.rejected, gs.abandoned, format_ms(gs.max_wait));
  }
  out << "]}\n}\n";
}

}  // namespace rc::sim
