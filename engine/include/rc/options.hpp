// Shared vocabulary of the option structs: the time units of `per`, the counting modes of windowed
// gates, and the validation helper that gives every RC5003 message one shape:
// `<op>({ <option> }) must be <rule>, got <value>.`
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "rc/error.hpp"
#include "rc/time.hpp"

namespace rc {

enum class per { second, minute, hour, day };

constexpr duration to_duration(per p) noexcept {
  switch (p) {
    case per::second:
      return std::chrono::seconds(1);
    case per::minute:
      return std::chrono::minutes(1);
    case per::hour:
      return std::chrono::hours(1);
    case per::day:
      return std::chrono::hours(24);
  }
  return std::chrono::seconds(1);
}

constexpr std::string_view to_string(per p) noexcept {
  switch (p) {
    case per::second:
      return "second";
    case per::minute:
      return "minute";
    case per::hour:
      return "hour";
    case per::day:
      return "day";
  }
  return "?";
}

/// How windowed gates (slow_down, rate_limit) count hits: `sliding` counts a key's arrivals in the
/// window before each one; `fixed` is express's window per key, opened by its first hit.
enum class counting : std::uint8_t { sliding, fixed };

constexpr std::string_view to_string(counting c) noexcept {
  switch (c) {
    case counting::sliding:
      return "sliding";
    case counting::fixed:
      return "fixed";
  }
  return "?";
}

/// Throws RC5003 with the standard message shape.
template <class Value>
[[noreturn]] void invalid_option(std::string_view op, std::string_view option, std::string_view rule,
                                 const Value& value) {
  throw error(errc::misconfigured, fmt::format("{}({{ {} }}) must be {}, got {}.", op, option, rule, value));
}

/// "250ms" style rendering for messages.
inline std::string ms_text(duration d) { return fmt::format("{}ms", to_ms(d)); }

}  // namespace rc
