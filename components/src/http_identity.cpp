// Who sent a request. The socket's peer is the client unless it is a trusted proxy; then the
// forwarding header is walked from the right (the hop nearest to us) past every trusted address,
// and the first untrusted one is the client. A header from an untrusted peer is never read, so a
// client cannot pick its own key. IPv6 keys are masked to a prefix: one subscriber's /56 is one
// client, however many addresses it rotates through.
#include <arpa/inet.h>
#include <fmt/format.h>

#include <cstring>

#include "http_internal.hpp"
#include "rc/error.hpp"

namespace rc {
namespace http_detail {
namespace {

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// One hop of a forwarding header: "1.2.3.4", "1.2.3.4:5678", "[2001:db8::1]:80", "2001:db8::1".
std::optional<ip_address> parse_hop(std::string_view hop) {
  hop = trim(hop);
  if (hop.size() >= 2 && hop.front() == '"' && hop.back() == '"') hop = hop.substr(1, hop.size() - 2);
  if (!hop.empty() && hop.front() == '[') {
    const auto close = hop.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    return parse_ip(hop.substr(1, close - 1));
  }
  if (auto a = parse_ip(hop)) return a;
  const auto colon = hop.find(':');
  if (colon != std::string_view::npos && hop.find(':', colon + 1) == std::string_view::npos)
    return parse_ip(hop.substr(0, colon));  // IPv4 with a port
  return std::nullopt;
}

// Splits on commas outside double quotes.
std::vector<std::string_view> split_list(std::string_view s) {
  std::vector<std::string_view> out;
  bool quoted = false;
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '"') quoted = !quoted;
    if (s[i] == ',' && !quoted) {
      out.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  out.push_back(trim(s.substr(start)));
  return out;
}

// The hops of the request, oldest first (the client's claim first, the nearest proxy last).
std::vector<std::string> forwarded_hops(const http_headers& headers, proxy_header which) {
  std::vector<std::string> hops;
  const std::string_view name = which == proxy_header::forwarded ? "Forwarded" : "X-Forwarded-For";
  for (const auto& [k, v] : headers) {
    if (!iequals(k, name)) continue;
    for (auto element : split_list(v)) {
      if (which == proxy_header::x_forwarded_for) {
        hops.emplace_back(element);
        continue;
      }
      // Forwarded: for=...;by=...;proto=...
      std::string for_value;
      std::size_t start = 0;
      while (start <= element.size()) {
        auto semi = element.find(';', start);
        if (semi == std::string_view::npos) semi = element.size();
        const auto pair = trim(element.substr(start, semi - start));
        const auto eq = pair.find('=');
        if (eq != std::string_view::npos && iequals(trim(pair.substr(0, eq)), "for"))
          for_value = std::string(trim(pair.substr(eq + 1)));
        start = semi + 1;
      }
      hops.push_back(std::move(for_value));  // an element without for= is an unknown hop
    }
  }
  return hops;
}

ip_address mask(ip_address a, int prefix) {
  const int bits = a.v4 ? 32 : 128;
  for (int i = 0; i < 16; ++i) {
    const int first = i * 8;
    if (first >= bits) {
      a.bytes[i] = 0;
      continue;
    }
    if (first + 8 <= prefix) continue;
    const int keep = std::max(0, prefix - first);
    a.bytes[i] &= static_cast<std::uint8_t>(0xFF00U >> keep);
  }
  return a;
}

ip_block block_of(std::string_view text) {
  auto bad = [&] {
    invalid_option("http_source", "server.trusted_proxies",
                   "addresses or CIDR blocks (\"10.0.0.0/8\", \"::1\", \"loopback\", \"private\")",
                   fmt::format("\"{}\"", text));
  };
  const auto slash = text.find('/');
  auto a = parse_ip(text.substr(0, slash));
  if (!a) bad();
  ip_block b{*a, a->v4 ? 32 : 128};
  if (slash != std::string_view::npos) {
    const auto p = text.substr(slash + 1);
    if (p.empty() || p.size() > 3 || p.find_first_not_of("0123456789") != std::string_view::npos) bad();
    b.prefix = std::stoi(std::string(p));
    if (b.prefix > (a->v4 ? 32 : 128)) bad();
  }
  b.base = mask(b.base, b.prefix);
  return b;
}

}  // namespace

std::optional<ip_address> parse_ip(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  char buf[INET6_ADDRSTRLEN] = {};
  std::memcpy(buf, text.data(), text.size());
  ip_address a;
  if (text.find(':') == std::string_view::npos) {
    if (inet_pton(AF_INET, buf, a.bytes.data()) != 1) return std::nullopt;
    a.v4 = true;
    return a;
  }
  if (const auto pct = text.find('%'); pct != std::string_view::npos) buf[pct] = '\0';  // zone id
  if (inet_pton(AF_INET6, buf, a.bytes.data()) != 1) return std::nullopt;
  static constexpr std::uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(a.bytes.data(), mapped, 12) == 0) {
    ip_address v4;
    v4.v4 = true;
    std::memcpy(v4.bytes.data(), a.bytes.data() + 12, 4);
    return v4;
  }
  return a;
}

std::string format_ip(const ip_address& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(a.v4 ? AF_INET : AF_INET6, a.bytes.data(), buf, sizeof buf);
  return buf;
}

bool ip_block::contains(const ip_address& a) const noexcept {
  if (a.v4 != base.v4) return false;
  const ip_address m = mask(a, prefix);
  return m.bytes == base.bytes;
}

client_resolver::client_resolver(const http_server_options& options)
    : header_(options.forwarded_header), ipv6_prefix_(options.ipv6_prefix) {
  for (const auto& entry : options.trusted_proxies) {
    if (entry == "loopback") {
      trusted_.push_back(block_of("127.0.0.0/8"));
      trusted_.push_back(block_of("::1/128"));
    } else if (entry == "private") {
      for (auto b : {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"}) trusted_.push_back(block_of(b));
    } else if (entry == "linklocal") {
      trusted_.push_back(block_of("169.254.0.0/16"));
      trusted_.push_back(block_of("fe80::/10"));
    } else {
      trusted_.push_back(block_of(entry));
    }
  }
}

bool client_resolver::trusted(const ip_address& a) const noexcept {
  for (const auto& b : trusted_)
    if (b.contains(a)) return true;
  return false;
}

std::string client_resolver::key_of(const ip_address& a) const {
  if (a.v4 || ipv6_prefix_ >= 128) return format_ip(a);
  return format_ip(mask(a, ipv6_prefix_)) + "/" + std::to_string(ipv6_prefix_);
}

http_client_identity client_resolver::resolve(const ip_address& peer, const http_headers& headers) const {
  ip_address client = peer;
  if (trusted(peer)) {
    const auto hops = forwarded_hops(headers, header_);
    for (auto it = hops.rbegin(); it != hops.rend(); ++it) {
      const auto hop = parse_hop(*it);
      if (!hop) break;  // "unknown", obfuscated or garbage: the last address we could vouch for stands
      client = *hop;
      if (!trusted(client)) break;
    }
  }
  return {format_ip(client), key_of(client)};
}

}  // namespace http_detail

http_client_identity resolve_http_client(std::string_view peer, const http_headers& headers,
                                         const http_server_options& options) {
  const http_detail::client_resolver resolver(options);
  const auto addr = http_detail::parse_ip(peer);
  if (!addr) throw error(errc::validation, fmt::format("resolve_http_client: \"{}\" is not an IP address", peer));
  return resolver.resolve(*addr, headers);
}

}  // namespace rc
