// RateLimit header formatting, with the small SHA-256 and base64 that draft-8's `pk` needs.
#include "rc/http_rate_limit_headers.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "http_internal.hpp"

namespace rc {
namespace {

constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) noexcept {
  const auto q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

void append_padded(std::string& out, std::int64_t value, int width) {
  auto digits = std::to_string(value);
  if (digits.size() < static_cast<std::size_t>(width)) out.append(width - digits.size(), '0');
  out += digits;
}

// ceil(window end / 1 s) as Unix seconds, computed without forming epoch nanoseconds.
std::int64_t reset_epoch_seconds(std::int64_t wall_now_epoch_ms, duration reset_in) {
  constexpr std::int64_t ns_per_ms = 1'000'000;
  constexpr std::int64_t ns_per_second = 1'000'000'000;
  const auto whole_seconds = floor_div(wall_now_epoch_ms, 1000);
  const auto rest = (wall_now_epoch_ms - whole_seconds * 1000) * ns_per_ms + reset_in.count();
  return whole_seconds + floor_div(rest, ns_per_second) + (rest % ns_per_second != 0 ? 1 : 0);
}

// ---- SHA-256 (FIPS 180-4) ----

constexpr std::array<std::uint32_t, 64> round_constants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

void compress(std::array<std::uint32_t, 8>& state, const unsigned char* block) noexcept {
  std::array<std::uint32_t, 64> w{};
  for (int i = 0; i < 16; ++i) {
    w[i] = std::uint32_t{block[4 * i]} << 24U | std::uint32_t{block[4 * i + 1]} << 16U |
           std::uint32_t{block[4 * i + 2]} << 8U | std::uint32_t{block[4 * i + 3]};
  }
  for (int i = 16; i < 64; ++i) {
    const auto s0 = std::rotr(w[i - 15], 7) ^ std::rotr(w[i - 15], 18) ^ (w[i - 15] >> 3U);
    const auto s1 = std::rotr(w[i - 2], 17) ^ std::rotr(w[i - 2], 19) ^ (w[i - 2] >> 10U);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  auto [a, b, c, d, e, f, g, h] = state;
  for (int i = 0; i < 64; ++i) {
    const auto sum1 = std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25);
    const auto choose = (e & f) ^ (~e & g);
    const auto t1 = h + sum1 + choose + round_constants[i] + w[i];
    const auto sum0 = std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22);
    const auto majority = (a & b) ^ (a & c) ^ (b & c);
    const auto t2 = sum0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  const std::array<std::uint32_t, 8> worked = {a, b, c, d, e, f, g, h};
  for (int i = 0; i < 8; ++i) state[i] += worked[i];
}

constexpr std::string_view hex_digits = "0123456789abcdef";

}  // namespace

std::string sha256_hex(std::string_view data) {
  std::array<std::uint32_t, 8> state = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
  std::size_t offset = 0;
  for (; data.size() - offset >= 64; offset += 64) compress(state, bytes + offset);

  // Last data, a 0x80 marker, zeros, then the message length in bits (big-endian): 1 or 2 blocks.
  std::array<unsigned char, 128> tail{};
  const auto rest = data.size() - offset;
  std::copy(bytes + offset, bytes + data.size(), tail.begin());
  tail[rest] = 0x80;
  const std::size_t tail_size = rest < 56 ? 64 : 128;
  const std::uint64_t bit_length = std::uint64_t{data.size()} * 8;
  for (int i = 0; i < 8; ++i) {
    tail[tail_size - 1 - i] = static_cast<unsigned char>(bit_length >> (8U * i));
  }
  for (std::size_t block = 0; block < tail_size; block += 64) compress(state, tail.data() + block);

  std::string hex;
  hex.reserve(64);
  for (const auto word : state) {
    for (int shift = 28; shift >= 0; shift -= 4) hex += hex_digits[(word >> shift) & 0xfU];
  }
  return hex;
}

std::string base64_encode(std::string_view bytes) {
  constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const auto available = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t group = 0;
    for (std::size_t k = 0; k < 3; ++k) {
      const auto byte = k < available ? static_cast<unsigned char>(bytes[i + k]) : 0U;
      group = group << 8U | byte;
    }
    for (std::size_t k = 0; k < 4; ++k) {
      out += k <= available ? alphabet[(group >> (18 - 6 * k)) & 0x3fU] : '=';
    }
  }
  return out;
}

std::string rate_limit_partition_key(std::string_view key) {
  return base64_encode(std::string_view{sha256_hex(key)}.substr(0, 12));
}

std::string http_date(std::int64_t epoch_ms) {
  using namespace std::chrono;
  constexpr std::array<std::string_view, 7> weekdays = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  constexpr std::array<std::string_view, 12> months = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const sys_seconds time{seconds{floor_div(epoch_ms, 1000)}};
  const auto day = floor<days>(time);
  const year_month_day date{day};
  const hh_mm_ss clock{time - day};
  const int year = static_cast<int>(date.year());

  std::string out;
  out.reserve(29);
  out += weekdays[weekday{day}.c_encoding()];
  out += ", ";
  append_padded(out, static_cast<unsigned>(date.day()), 2);
  out += ' ';
  out += months[static_cast<unsigned>(date.month()) - 1];
  out += ' ';
  if (year < 0) out += '-';
  append_padded(out, year < 0 ? -std::int64_t{year} : year, 4);
  out += ' ';
  append_padded(out, clock.hours().count(), 2);
  out += ':';
  append_padded(out, clock.minutes().count(), 2);
  out += ':';
  append_padded(out, clock.seconds().count(), 2);
  out += " GMT";
  return out;
}

namespace {

// Appends the decimal digits of n.
template <class Int>
void append_number(std::string& out, Int n) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
  out.append(digits, end);
}

// The one formatter behind rate_limit_header_list and each_rate_limit_header: calls
// emit(name, value) for each header in order. Each value is built in `value` (its capacity is
// reused) and is valid only during the call.
template <class Emit>
void emit_rate_limit_headers(rate_limit_headers mode, std::uint64_t limit, std::uint64_t remaining, duration window,
                             duration reset_in, std::string_view key, std::string_view policy_name,
                             std::int64_t wall_now_epoch_ms, rate_limit_outcome outcome,
                             std::optional<std::string_view> retry_after, std::string& value, Emit&& emit) {
  using enum rate_limit_headers;
  const auto window_seconds = rate_limit_window_seconds(window);
  const auto reset_seconds = rate_limit_reset_seconds(reset_in);
  // A value is written into a buffer on the stack when it surely fits (every one but a draft-8
  // value with a long policy name), else into `value`.
  char small[192];
  const auto set = [&value, &small](auto... parts) {
    std::size_t bound = 0;
    (
        [&] {
          if constexpr (std::is_integral_v<decltype(parts)>)
            bound += 20;  // the digits of any 64-bit integer, with a sign
          else
            bound += parts.size();
        }(),
        ...);
    if (bound <= sizeof small) {
      char* p = small;
      (
          [&] {
            if constexpr (std::is_integral_v<decltype(parts)>) {
              p = std::to_chars(p, small + sizeof small, parts).ptr;
            } else {
              std::memcpy(p, parts.data(), parts.size());
              p += parts.size();
            }
          }(),
          ...);
      return std::string_view(small, static_cast<std::size_t>(p - small));
    }
    value.clear();
    (
        [&] {
          if constexpr (std::is_integral_v<decltype(parts)>)
            append_number(value, parts);
          else
            value += parts;
        }(),
        ...);
    return std::string_view(value);
  };

  if (includes(mode, legacy)) {
    emit("X-RateLimit-Limit", set(limit));
    emit("X-RateLimit-Remaining", set(remaining));
    emit("Date", set(std::string_view(http_date(wall_now_epoch_ms))));
    emit("X-RateLimit-Reset", set(reset_epoch_seconds(wall_now_epoch_ms, reset_in)));
  }

  const auto draft = mode & (draft_6 | draft_7 | draft_8);
  if (draft == draft_6) {
    emit("RateLimit-Policy", set(limit, std::string_view(";w="), window_seconds));
    emit("RateLimit-Limit", set(limit));
    emit("RateLimit-Remaining", set(remaining));
    emit("RateLimit-Reset", set(reset_seconds));
  } else if (draft == draft_7) {
    emit("RateLimit-Policy", set(limit, std::string_view(";w="), window_seconds));
    emit("RateLimit", set(std::string_view("limit="), limit, std::string_view(", remaining="), remaining,
                          std::string_view(", reset="), reset_seconds));
  } else if (draft == draft_8) {
    const std::string name = policy_name.empty() ? rate_limit_policy_name(limit, window) : std::string(policy_name);
    emit("RateLimit", set(std::string_view("\""), std::string_view(name), std::string_view("\"; r="), remaining,
                          std::string_view("; t="), reset_seconds));
    emit("RateLimit-Policy", set(std::string_view("\""), std::string_view(name), std::string_view("\"; q="), limit,
                                 std::string_view("; w="), window_seconds, std::string_view("; pk=:"),
                                 std::string_view(rate_limit_partition_key(key)), std::string_view(":")));
  }

  if (outcome == rate_limit_outcome::rejected && mode != none) {
    emit("Retry-After", retry_after ? set(*retry_after) : set(reset_seconds));
  }
}

}  // namespace

header_list rate_limit_header_list(rate_limit_headers mode, const rate_limit_info& info, std::int64_t wall_now_epoch_ms,
                                   rate_limit_outcome outcome, std::optional<std::string_view> retry_after) {
  header_list headers;
  std::string value;
  emit_rate_limit_headers(mode, info.limit, info.remaining, info.window, info.reset_in, info.key, info.policy_name,
                          wall_now_epoch_ms, outcome, retry_after, value,
                          [&](std::string_view name, std::string_view v) { headers.emplace_back(name, v); });
  return headers;
}

header_list rate_limit_headers_of(const limit_note& note) {
  header_list headers;
  http_detail::each_rate_limit_header(
      note, [&](std::string_view name, std::string_view v) { headers.emplace_back(name, v); });
  return headers;
}

void http_detail::each_rate_limit_header(const limit_note& note,
                                         http_detail::function_ref<void(std::string_view, std::string_view)> emit) {
  if (note.header_mode == rate_limit_headers::none) return;
  // The values are built here, one at a time: a response's headers cost no allocation once this
  // thread's buffer has grown to the longest one.
  thread_local std::string value;
  char retry_after[24];
  const auto retry_end =
      std::to_chars(retry_after, retry_after + sizeof retry_after, rate_limit_reset_seconds(note.retry_after)).ptr;
  emit_rate_limit_headers(note.header_mode, note.limit, note.remaining, note.window, note.reset, note.key, note.policy,
                          note.wall_ms, note.rejected ? rate_limit_outcome::rejected : rate_limit_outcome::passed,
                          std::string_view(retry_after, static_cast<std::size_t>(retry_end - retry_after)), value,
                          emit);
}

}  // namespace rc
