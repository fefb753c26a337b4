// A slow_down delay written as arithmetic in `hits` ("(hits - 3)^2 * 1000", milliseconds),
// parsed by muparser. Callable as the engine's delay function: hit number in, wait out.
//
// The expression is parsed and tried once when it is read, so a syntax error or an unknown name
// is refused with its JSON path before anything runs. Copies share one parser (muparser binds
// variables by address); rc-sim runs on one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <rc/time.hpp>
#include <string>

namespace rc::sim {

class delay_expression {
 public:
  /// Throws scenario_error naming `path` when the expression does not parse.
  delay_expression(const std::string& text, const std::string& path);
  duration operator()(std::uint64_t hits) const;
  const std::string& text() const noexcept;

 private:
  struct state;
  std::shared_ptr<state> state_;
};

}  // namespace rc::sim
