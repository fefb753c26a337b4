// Fuzz target: rc-sim's scenario reader, JSON text to the engine's option structs
// (tools/rc_sim/scenario.hpp), then the engine's own validation (check_scenario builds the route
// with the DSL). A scenario small enough to run in a moment is also run and reported, charts
// included: anything the reader let through must be something the engine can run.
#include <nlohmann/json.hpp>
#include <rc/error.hpp>
#include <sstream>
#include <string>
#include <string_view>

#include "chart.hpp"
#include "fuzz_harness.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "scenario.hpp"

namespace rc::fuzz {

namespace {
// A refusal the user sees: it must say something.
void refused(std::string_view what) {
  if (what.empty()) throw finding("a refused scenario with an empty message");
}
}  // namespace

void scenario(std::string_view input) {
  const auto doc = nlohmann::json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return;  // load_scenario's "not valid JSON"; nlohmann's own parser is not ours to fuzz
  sim::scenario s;
  try {
    s = sim::parse_scenario(doc, "fuzz");
    sim::check_scenario(s);
  } catch (const sim::scenario_error& e) {
    return refused(e.what());
  } catch (const rc::error& e) {
    return refused(e.what());
  }
  if (s.request_count() > 64 || s.gates.size() > 8) return;
  try {
    const sim::run_report report = sim::run_scenario(s);
    if (report.requests.size() != s.request_count()) throw finding("the run lost or invented requests");
    const sim::summary sum = sim::summarize(s, report);
    std::ostringstream out;
    sim::write_table(out, s, report, sum, true);
    sim::write_csv(out, s, report);
    sim::write_json(out, s, report, sum);
    sim::write_svg(out, s, report, sum);
  } catch (const sim::scenario_error& e) {
    return refused(e.what());
  } catch (const rc::error& e) {
    return refused(e.what());
  }
}

}  // namespace rc::fuzz
