// Parsing sources: a source whose records need parsing (rc::json, rc::jsonl, rc::csv) emits the
// raw record and attaches a parse step (source_base::make_parse_step). The route places that step
// first in its chain, right inside the error handler and before the gates, so a record that does
// not parse takes no throttle token and an `.error()` handler still sees the failure.
//
// What a parse failure does is the route's `on_parse_error` (builder: `.on_parse_error(...)`
// before from()):
//   fail  (default) the exchange fails with RC5016 (path, line / record number, parser message);
//   drop  the exchange is dropped with reason "parse-failed";
//   abort the exchange fails as with `fail`, then the source stops producing.
// Every failure also emits route:parse:failed {routeId, exchangeId, adapter, mode, error}, so a
// dropped record is never silent.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <string_view>

#include "rc/error.hpp"
#include "rc/step.hpp"

namespace rc {

enum class parse_error : std::uint8_t { fail, drop, abort };

constexpr std::string_view to_string(parse_error m) noexcept {
  switch (m) {
    case parse_error::fail:
      return "fail";
    case parse_error::drop:
      return "drop";
    case parse_error::abort:
      return "abort";
  }
  return "?";
}

/// The step a parsing source attaches. `parse` replaces the raw body by the typed one, or throws
/// (an rc::error RC5016 with the record's position; anything else is wrapped into one).
class parse_step : public step {
 public:
  /// `stop` is the source's flag, set when a failure in abort mode asks it to stop.
  parse_step(parse_error mode, std::atomic<bool>* stop) : mode_(mode), stop_(stop) {}

  std::string_view operation() const override { return "parse"; }
  bool synchronous() const noexcept override { return true; }
  outcome run_now(exchange& ex, route_runtime& rt) final;

  parse_error mode() const noexcept { return mode_; }

 protected:
  virtual void parse(exchange& ex) = 0;
  /// Where the record came from, for a message wrapping a foreign exception ("in.jsonl line 3").
  virtual std::string where(const exchange& ex) const = 0;

 private:
  parse_error mode_;
  std::atomic<bool>* stop_;
};

}  // namespace rc
