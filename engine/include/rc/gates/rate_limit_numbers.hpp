// Rate-limit numbers: what a limit note (exchange.hpp) says, and the header mode a rate_limit gate
// asks a transport for. Plain arithmetic and names; no header is rendered here (the HTTP
// component does that: rc/http_rate_limit_headers.hpp).
//
// The header mode is a set of flags because express's legacyHeaders and standardHeaders are
// independent: `draft_6 | legacy` asks for both families. At most one draft may be set
// (is_valid_header_mode).
#pragma once

#include <cstdint>
#include <string>

#include "rc/time.hpp"

namespace rc {

/// Which RateLimit headers a transport writes for a rate_limit gate's notes.
enum class rate_limit_headers : std::uint8_t {
  none = 0,
  draft_6 = 1U << 0U,
  draft_7 = 1U << 1U,
  draft_8 = 1U << 2U,
  legacy = 1U << 3U,
};

constexpr rate_limit_headers operator|(rate_limit_headers a, rate_limit_headers b) noexcept {
  return static_cast<rate_limit_headers>(static_cast<std::uint8_t>(a) | static_cast<std::uint8_t>(b));
}
constexpr rate_limit_headers operator&(rate_limit_headers a, rate_limit_headers b) noexcept {
  return static_cast<rate_limit_headers>(static_cast<std::uint8_t>(a) & static_cast<std::uint8_t>(b));
}
constexpr bool includes(rate_limit_headers mode, rate_limit_headers part) noexcept {
  return part != rate_limit_headers::none && (mode & part) == part;
}
/// Known flags only, and at most one standard draft.
constexpr bool is_valid_header_mode(rate_limit_headers mode) noexcept {
  using enum rate_limit_headers;
  const auto draft = mode & (draft_6 | draft_7 | draft_8);
  return (mode & (draft_6 | draft_7 | draft_8 | legacy)) == mode &&
         (draft == none || draft == draft_6 || draft == draft_7 || draft == draft_8);
}

/// max(limit - used, 0) without unsigned wrap-around.
constexpr std::uint64_t rate_limit_remaining(std::uint64_t limit, std::uint64_t used) noexcept {
  return used >= limit ? 0 : limit - used;
}

/// ceil(window / 1 s): the `w=` value.
constexpr std::int64_t rate_limit_window_seconds(duration window) noexcept {
  const auto ns = window.count();
  constexpr std::int64_t second = 1'000'000'000;
  return ns / second + (ns % second > 0 ? 1 : 0);
}

/// max(0, ceil(reset_in / 1 s)): RateLimit-Reset, reset=, t= and the default Retry-After.
constexpr std::int64_t rate_limit_reset_seconds(duration reset_in) noexcept {
  return reset_in <= duration::zero() ? 0 : rate_limit_window_seconds(reset_in);
}

/// express's default draft-8 identifier: "<limit>-in-<duration>", e.g. "7-in-30sec", "5-in-1.5hrs".
std::string rate_limit_policy_name(std::uint64_t limit, duration window);

/// A double as JavaScript's Number#toString prints it (shortest round-trip digits).
std::string format_js_number(double value);

}  // namespace rc
