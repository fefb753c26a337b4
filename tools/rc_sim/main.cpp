// rc-sim: runs a limiter configuration against a traffic script in virtual time.
//
//   rc-sim SCENARIO.json [--svg out.svg] [--csv out.csv] [--json out.json] [--quiet]
//
// Prints the per-request table and the summary (only the summary with --quiet) and writes the
// requested files. Exit codes: 0 done, 1 an output could not be written, 2 bad usage or a
// scenario the engine refuses (the message names the JSON path).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <rc/error.hpp>
#include <string>
#include <string_view>

#include "chart.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "scenario.hpp"

namespace {

constexpr std::string_view usage =
    "usage: rc-sim SCENARIO.json [--svg out.svg] [--csv out.csv] [--json out.json] [--quiet]\n"
    "Runs the scenario's gates (throttle, slow_down, rate_limit, retry, delay) against its traffic\n"
    "in virtual time, prints a table per request and a summary, and writes the chart / CSV / JSON.\n"
    "See docs/rc-sim.md for the scenario format.\n";

struct options {
  std::string scenario;
  std::optional<std::string> svg, csv, json;
  bool quiet = false;
};

std::optional<options> parse_args(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&](std::optional<std::string>& slot) {
      if (i + 1 >= argc) return false;
      slot = argv[++i];
      return true;
    };
    if (a == "--svg") {
      if (!value(o.svg)) return std::nullopt;
    } else if (a == "--csv") {
      if (!value(o.csv)) return std::nullopt;
    } else if (a == "--json") {
      if (!value(o.json)) return std::nullopt;
    } else if (a == "--quiet" || a == "-q") {
      o.quiet = true;
    } else if (a.starts_with("-") && a != "-") {
      return std::nullopt;
    } else if (o.scenario.empty()) {
      o.scenario = a;
    } else {
      return std::nullopt;
    }
  }
  if (o.scenario.empty()) return std::nullopt;
  return o;
}

template <class Write>
bool write_file(const std::string& path, Write write) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) write(out);
  out.flush();
  if (!out) {
    std::cerr << "rc-sim: cannot write " << path << "\n";
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h")) {
    std::cout << usage;
    return 0;
  }
  const auto opts = parse_args(argc, argv);
  if (!opts) {
    std::cerr << usage;
    return 2;
  }
  using namespace rc::sim;
  try {
    const scenario s = load_scenario(opts->scenario);
    check_scenario(s);
    // Only the summary is printed and no file is written: keep no per-request report, fold each
    // request into the summary as it ends (a million requests then take the memory of those in
    // flight, not of all of them).
    const bool summary_only = opts->quiet && !opts->csv && !opts->json && !opts->svg;
    summary_builder builder(s);
    run_options ro;
    if (summary_only) {
      builder.reserve(s.request_count());
      ro.keep_requests = false;
      ro.on_finished = [&builder](const request_result& q) { builder.add(q); };
    }
    const run_report report = run_scenario(s, ro);
    const summary sum = summary_only ? builder.finish(report.request_count) : summarize(s, report);

    std::ios::sync_with_stdio(false);
    write_table(std::cout, s, report, sum, !opts->quiet);
    std::cout.flush();
    bool ok = true;
    if (opts->csv) ok = write_file(*opts->csv, [&](std::ostream& o) { write_csv(o, s, report); }) && ok;
    if (opts->json) ok = write_file(*opts->json, [&](std::ostream& o) { write_json(o, s, report, sum); }) && ok;
    if (opts->svg) ok = write_file(*opts->svg, [&](std::ostream& o) { write_svg(o, s, report, sum); }) && ok;
    return ok ? 0 : 1;
  } catch (const scenario_error& e) {
    std::cerr << "rc-sim: " << opts->scenario << ": " << e.what() << "\n";
    return 2;
  } catch (const rc::error& e) {
    std::cerr << "rc-sim: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "rc-sim: internal error: " << e.what() << "\n";
    return 1;
  }
}
