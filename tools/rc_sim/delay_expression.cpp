#include "delay_expression.hpp"

#include <fmt/format.h>
#include <muParser.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "scenario.hpp"

namespace rc::sim {

struct delay_expression::state {
  mu::Parser parser;
  double hits = 0;
  std::string text;
};

delay_expression::delay_expression(const std::string& text, const std::string& path)
    : state_(std::make_shared<state>()) {
  state_->text = text;
  try {
    state_->parser.DefineVar("hits", &state_->hits);
    state_->parser.SetExpr(text);
    state_->hits = 1;
    (void)state_->parser.Eval();  // muparser checks names and syntax on first evaluation
  } catch (const mu::Parser::exception_type& e) {
    throw scenario_error(path, fmt::format("cannot read the delay expression \"{}\": {} (write milliseconds as "
                                           "arithmetic in `hits`, e.g. \"(hits - 3)^2 * 1000\")",
                                           text, e.GetMsg()));
  }
}

duration delay_expression::operator()(std::uint64_t hits) const {
  state_->hits = static_cast<double>(hits);
  const double ms = state_->parser.Eval();
  // The gate clamps to [0, max_delay]; only values a duration cannot hold are settled here.
  if (std::isnan(ms)) return duration::zero();
  constexpr double limit = 9.0e12;  // ms: inside the 64-bit nanosecond range
  return duration(static_cast<std::int64_t>(std::llround(std::clamp(ms, -limit, limit) * 1e6)));
}

const std::string& delay_expression::text() const noexcept { return state_->text; }

}  // namespace rc::sim
