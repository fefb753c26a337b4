// `--listen ADDR:PORT` for the samples that run an HTTP server: "127.0.0.1:8080", "0.0.0.0:80",
// "localhost:8080", IPv6 in brackets ("[::1]:8080", "[::]:8080"); port 0 picks a free one.
// A malformed value is an error that says what was expected.
#pragma once

#include <arpa/inet.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace samples {

struct listen_address {
  std::string host = "127.0.0.1";  // as rc::http_source takes it: no brackets
  std::uint16_t port = 8080;

  /// The host as a URL writes it ("[::1]" for IPv6).
  std::string url_host() const { return host.find(':') == std::string::npos ? host : "[" + host + "]"; }
};

/// Throws std::invalid_argument with a message naming the problem.
inline listen_address parse_listen(std::string_view text) {
  const auto fail = [&](std::string_view why) {
    throw std::invalid_argument("--listen \"" + std::string(text) + "\": " + std::string(why) +
                                " (expected ADDR:PORT, e.g. 127.0.0.1:8080 or [::1]:8080)");
  };
  listen_address a;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) fail("no ']' after the IPv6 address");
    a.host = std::string(text.substr(1, close - 1));
    if (text.substr(close + 1, 1) != ":") fail("no ':PORT' after the ']'");
    port_text = text.substr(close + 2);
    in6_addr v6{};
    if (::inet_pton(AF_INET6, a.host.c_str(), &v6) != 1) fail("not an IPv6 address inside the brackets");
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) fail("no ':PORT'");
    if (text.find(':') != colon) fail("an IPv6 address goes in brackets");
    a.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
    in_addr v4{};
    if (a.host != "localhost" && ::inet_pton(AF_INET, a.host.c_str(), &v4) != 1)
      fail("not an IPv4 address (or \"localhost\")");
  }
  if (port_text.empty() || port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string_view::npos)
    fail("the port is not a number");
  const unsigned long port = std::stoul(std::string(port_text));
  if (port > 65535) fail("the port is not in [0, 65535]");
  a.port = static_cast<std::uint16_t>(port);
  return a;
}

}  // namespace samples
