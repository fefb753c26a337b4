// RateLimit response headers, byte for byte as express-rate-limit 8 writes them, from the numbers
// a rate_limit gate puts on the exchange (limit_note). The engine knows no HTTP: rendering is here.
//
// A pure function of the limiter's numbers: the wall-clock time is a parameter (legacy headers
// need absolute epoch seconds and a Date), nothing here reads a clock. Order follows express:
// legacy headers, then the one standard draft, then Retry-After on a rejection. A mode with
// several drafts writes no standard headers but, like an unsupported draft in express, still
// turns Retry-After on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rc/exchange.hpp"
#include "rc/gates/rate_limit_numbers.hpp"
#include "rc/time.hpp"

namespace rc {

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

/// The headers for one counted request. `retry_after` replaces the computed Retry-After value
/// verbatim (express's retryAfter option); Retry-After is written only on a rejection and only
/// when some header mode is on.
header_list rate_limit_header_list(rate_limit_headers mode, const rate_limit_info& info, std::int64_t wall_now_epoch_ms,
                                   rate_limit_outcome outcome = rate_limit_outcome::passed,
                                   std::optional<std::string_view> retry_after = std::nullopt);

/// The headers a limit note asks for (its header_mode; none for a note without one), as the HTTP
/// source writes them on the response: Retry-After with the note's retry_after on a refusal.
header_list rate_limit_headers_of(const limit_note& note);

// Building blocks, public for tests and for transports that format their own headers.

/// draft-8 `pk`: base64 of the first 12 hex characters of SHA-256(key); always 16 characters.
std::string rate_limit_partition_key(std::string_view key);

/// An IMF-fixdate as JavaScript's Date#toUTCString prints it: "Thu, 01 Jan 1970 00:00:00 GMT".
std::string http_date(std::int64_t epoch_ms);

/// Lower-case hex SHA-256 digest (64 characters).
std::string sha256_hex(std::string_view data);

/// Standard base64 (RFC 4648 alphabet, '=' padding).
std::string base64_encode(std::string_view bytes);

}  // namespace rc
