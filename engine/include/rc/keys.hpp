// Key selectors: which per-key state of a keyed gate (throttle, slow_down, rate_limit) an exchange
// counts against.
//
// by_header(name) reads one header; an exchange without it counts against `fallback` (default
// ""), so leaving the header out never escapes a limit: it joins everyone else who left it out.
// by_client() reads "routecraft.client", the header a transport stamps with the caller's
// identity (the HTTP source puts the peer address there).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "rc/exchange.hpp"

namespace rc {

using key_selector = std::function<std::string(const exchange&)>;

/// The header a transport fills with the caller's identity.
inline constexpr std::string_view client_header = "routecraft.client";

/// The value of header `name` (a non-string value as its JSON text), or `fallback` when absent.
inline key_selector by_header(std::string name, std::string fallback = {}) {
  return [name = std::move(name), fallback = std::move(fallback)](const exchange& ex) {
    return ex.header_or(name, fallback);
  };
}

/// by_header("routecraft.client").
inline key_selector by_client(std::string fallback = {}) {
  return by_header(std::string(client_header), std::move(fallback));
}

}  // namespace rc
