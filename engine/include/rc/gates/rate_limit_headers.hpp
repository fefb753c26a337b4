// RateLimit response headers, byte for byte as express-rate-limit 8 writes them (reference §2.3).
//
// A pure function of the limiter's numbers: the wall-clock time is a parameter (legacy headers
// need absolute epoch seconds and a Date), nothing here reads a clock. Order follows express:
// legacy headers, then the one standard draft, then Retry-After on a rejection.
//
// The header mode is a set of flags because express's legacyHeaders and standardHeaders are
// independent: `draft_6 | legacy` writes both families. At most one draft may be set
// (is_valid_header_mode); a set with several drafts writes no standard headers but, like an
// unsupported draft in express, still turns Retry-After on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rc/time.hpp"

namespace rc {

enum class rate_limit_headers : std::uint8_t {
  none = 0,
  draft_6 = 1U << 0U,
  draft_7 = 1U << 1U,
  draft_8 = 1U << 2U,
  legacy = 1U << 3U,
};

constexpr rate_limit_headers operator|(rate_limit_headers a, rate_limit_headers b) noexcept {
  return static_cast<rate_limit_headers>(static_cast<std::uint8_t>(a) |
                                         static_cast<std::uint8_t>(b));
}
constexpr rate_limit_headers operator&(rate_limit_headers a, rate_limit_headers b) noexcept {
  return static_cast<rate_limit_headers>(static_cast<std::uint8_t>(a) &
                                         static_cast<std::uint8_t>(b));
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

struct rate_limit_info {
  std::uint64_t limit = 0;
  std::uint64_t used = 0;       ///< this request's hit number
  std::uint64_t remaining = 0;  ///< rate_limit_remaining(limit, used)
  duration reset_in{};          ///< until the count drops (the window end, for fixed windows)
  duration window{};
  std::string key;
  std::string policy_name;  ///< draft-8 identifier; empty means "<limit>-in-<duration>"
};

enum class rate_limit_outcome : std::uint8_t { passed, rejected };

using header_list = std::vector<std::pair<std::string, std::string>>;

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

/// The headers for one counted request. `retry_after` replaces the computed Retry-After value
/// verbatim (express's retryAfter option); Retry-After is written only on a rejection and only
/// when some header mode is on.
header_list rate_limit_header_list(rate_limit_headers mode, const rate_limit_info& info,
                                   std::int64_t wall_now_epoch_ms,
                                   rate_limit_outcome outcome = rate_limit_outcome::passed,
                                   std::optional<std::string_view> retry_after = std::nullopt);

// Building blocks, public for tests and for transports that format their own headers.

/// express's default draft-8 identifier: "<limit>-in-<duration>", e.g. "7-in-30sec", "5-in-1.5hrs".
std::string rate_limit_policy_name(std::uint64_t limit, duration window);

/// draft-8 `pk`: base64 of the first 12 hex characters of SHA-256(key); always 16 characters.
std::string rate_limit_partition_key(std::string_view key);

/// A double as JavaScript's Number#toString prints it (shortest round-trip digits).
std::string format_js_number(double value);

/// An IMF-fixdate as JavaScript's Date#toUTCString prints it: "Thu, 01 Jan 1970 00:00:00 GMT".
std::string http_date(std::int64_t epoch_ms);

/// Lower-case hex SHA-256 digest (64 characters).
std::string sha256_hex(std::string_view data);

/// Standard base64 (RFC 4648 alphabet, '=' padding).
std::string base64_encode(std::string_view bytes);

}  // namespace rc
