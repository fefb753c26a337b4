// Checks of a deferred error's details read one name at a time before they are built.
#pragma once

#include <catch2/catch.hpp>
#include <rc/error.hpp>
#include <string>
#include <utility>
#include <vector>

namespace rc::test {

/// Each name of `built` (the details of a copy of `unread`, built), the names a transport asks of a
/// refusal (an HTTP status, body and headers) and `absent_too`, read from a fresh copy of `unread`
/// as its first read: present with the built value, or absent as in `built`.
inline void check_details_read_unbuilt(const rc::error& unread, const nlohmann::json& built,
                                       std::vector<std::string> absent_too = {}) {
  std::vector<std::string> names = std::move(absent_too);
  for (const auto& [name, value] : built.items()) names.push_back(name);
  for (const char* asked : {"status", "message", "headers"}) names.emplace_back(asked);
  for (const auto& field : names) {
    CAPTURE(field);
    const rc::error fresh = unread;  // unbuilt: each name is its first read
    const nlohmann::json* one = fresh.detail(field);
    const auto it = built.find(field);
    REQUIRE((one != nullptr) == (it != built.end()));
    if (one) CHECK(*one == *it);
  }
}

}  // namespace rc::test
