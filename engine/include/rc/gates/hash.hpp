// Hashing for the keyed tables and sketches: a finaliser and a hash of a key's bytes.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace rc::detail {

/// splitmix64's finaliser: every input bit reaches every output bit.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/// A 64-bit hash of a key's bytes, for tables: a few multiplies for a short key, where
/// std::hash calls a general routine. Like std::hash it is not seeded, so not a defence against
/// keys chosen to collide; every bit of the key reaches every bit of the result.
inline std::uint64_t hash_key(std::string_view key) noexcept {
  constexpr std::uint64_t k0 = 0x9E3779B97F4A7C15ull;  // odd: a multiply by it is a bijection
  constexpr std::uint64_t k1 = 0xC2B2AE3D27D4EB4Full;
  const auto load64 = [](const char* p) noexcept {
    std::uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  const auto load32 = [](const char* p) noexcept {
    std::uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return std::uint64_t{v};
  };
  const char* p = key.data();
  const std::size_t n = key.size();
  std::uint64_t acc = n * k1;
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  if (n > 16) {
    // Whole 16-byte blocks but the last; the last 16 bytes (overlapping) are a and b below.
    for (std::size_t at = 0; at + 16 < n; at += 16)
      acc = (std::rotl(acc ^ (load64(p + at) * k0), 31) ^ load64(p + at + 8)) * k1;
    a = load64(p + n - 16);
    b = load64(p + n - 8);
  } else if (n >= 8) {  // two loads that overlap unless n is 16
    a = load64(p);
    b = load64(p + n - 8);
  } else if (n >= 4) {
    a = load32(p);
    b = load32(p + n - 4);
  } else if (n > 0) {
    a = (std::uint64_t{static_cast<unsigned char>(p[0])} << 16) |
        (std::uint64_t{static_cast<unsigned char>(p[n / 2])} << 8) | static_cast<unsigned char>(p[n - 1]);
  }
  return mix64(acc ^ (a * k0) ^ std::rotl(b * k1, 29));
}

}  // namespace rc::detail
