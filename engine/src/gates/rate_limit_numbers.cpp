// Rate-limit numbers: the default draft-8 policy name and the JavaScript number format it uses.
#include "rc/gates/rate_limit_numbers.hpp"

#include <array>
#include <charconv>
#include <cmath>

namespace rc {

std::string format_js_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  if (value == 0) return "0";  // also -0, as JavaScript prints it
  std::array<char, 400> buffer{};
  const auto magnitude = std::fabs(value);
  // JavaScript switches to exponent notation outside [1e-6, 1e21).
  if (magnitude >= 1e-6 && magnitude < 1e21) {
    const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value, std::chars_format::fixed);
    return {buffer.data(), result.ptr};
  }
  const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value, std::chars_format::scientific);
  std::string text{buffer.data(), result.ptr};
  // to_chars writes at least two exponent digits ("1e-07"); JavaScript writes "1e-7".
  const auto exponent_digits = text.find('e') + 2;
  const auto first_nonzero = text.find_first_not_of('0', exponent_digits);
  text.erase(exponent_digits, first_nonzero - exponent_digits);
  return text;
}

std::string rate_limit_policy_name(std::uint64_t limit, duration window) {
  // Each unit divides the milliseconds directly, as express does, so last digits match.
  const auto window_ms = to_ms(window);
  const auto seconds = window_ms / 1e3;
  const auto minutes = window_ms / (1e3 * 60);
  const auto hours = window_ms / (1e3 * 60 * 60);
  const auto days = window_ms / (1e3 * 60 * 60 * 24);
  std::string name = std::to_string(limit) + "-in-";
  if (seconds < 60) return name + format_js_number(seconds) + "sec";
  if (minutes < 60) return name + format_js_number(minutes) + "min";
  if (hours < 24) return name + format_js_number(hours) + (hours > 1 ? "hrs" : "hr");
  return name + format_js_number(days) + (days > 1 ? "days" : "day");
}

}  // namespace rc
