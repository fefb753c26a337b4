// Fuzz target: the text the HTTP components take from configuration and from the network
// (components/src/http_internal.hpp, rc/http.hpp): a client's URL, the listen host, path and
// method, trusted proxies with the X-Forwarded-For / Forwarded headers a client sends, a server's
// Retry-After, query parameters.
//
// Input: the first byte picks the entry point, the rest is its text; entry points with several
// fields take them one per line. Bad options must be RC5003 (invalid_option); what is accepted
// must make sense (a parsed address prints and parses back to itself, a URL has a host and a port).
#include <rc/error.hpp>
#include <rc/http.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_harness.hpp"
#include "http_internal.hpp"

namespace rc::fuzz {

namespace {

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> lines;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    lines.emplace_back(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
  }
  return lines;
}

// Runs `f`; an rc::error other than RC5003 is a finding (other exceptions escape: findings too).
template <class F>
bool accepted(F f) {
  try {
    f();
    return true;
  } catch (const rc::error& e) {
    if (e.code() != errc::misconfigured) throw finding(std::string("not RC5003: ") + e.what());
    return false;
  }
}

void url(std::string_view text) {
  http_detail::url_parts u;
  if (!accepted([&] { u = http_detail::parse_url(text); })) return;
  if (u.host.empty() || u.port == 0 || u.target.empty() || u.target.front() != '/')
    throw finding("parse_url accepted a URL without host, port or target");
  rc::http_options o;  // the type, not this target's function
  o.url = std::string(text);
  (void)accepted([&] { o.validate(); });
}

void ip(std::string_view text) {
  const auto a = http_detail::parse_ip(text);
  if (!a) return;
  const std::string printed = http_detail::format_ip(*a);
  const auto again = http_detail::parse_ip(printed);
  if (!again || again->bytes != a->bytes || again->v4 != a->v4)
    throw finding("an address does not parse back from its text: " + printed);
}

// Line 1: trusted proxies, comma-separated; line 2: the peer; the rest: request headers.
void identity(std::string_view text, unsigned char flags) {
  const auto lines = lines_of(text);
  http_server_options o;
  if (!lines.empty()) {
    std::string_view list = lines[0];
    while (!list.empty()) {
      const auto comma = list.find(',');
      o.trusted_proxies.emplace_back(list.substr(0, comma));
      list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    }
  }
  o.forwarded_header = (flags & 1) ? proxy_header::forwarded : proxy_header::x_forwarded_for;
  o.ipv6_prefix = 1 + (flags >> 1) % 128;
  if (!accepted([&] { o.validate(); })) return;
  const std::string peer = lines.size() > 1 ? lines[1] : "127.0.0.1";
  if (!http_detail::parse_ip(peer)) return;
  http_headers headers;
  for (std::size_t i = 2; i < lines.size(); ++i) {
    const auto colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    headers.emplace_back(lines[i].substr(0, colon), lines[i].substr(colon + 1));
  }
  const auto who = resolve_http_client(peer, headers, o);
  if (!http_detail::parse_ip(who.address)) throw finding("the client is not an address: " + who.address);
  if (who.key.empty()) throw finding("an empty client key");
}

void retry_after(std::string_view text) {
  const auto ms = http_detail::parse_retry_after(text, 1'700'000'000'000);
  if (ms && !(*ms >= 0)) throw finding("a negative or NaN Retry-After");
}

// Line 1: host, line 2: path, line 3: method.
void source_options(std::string_view text) {
  const auto lines = lines_of(text);
  http_source_options o;
  if (lines.size() > 0) o.host = lines[0];
  if (lines.size() > 1) o.path = lines[1];
  if (lines.size() > 2) o.method = lines[2];
  (void)accepted([&] { o.validate(); });
}

// Line 1: the query string, line 2: the parameter's name.
void query(std::string_view text) {
  const auto lines = lines_of(text);
  rc::http_request r;
  if (lines.size() > 0) r.query = lines[0];
  const auto v = r.query_param(lines.size() > 1 ? lines[1] : "q");
  if (v && v->size() > r.query.size()) throw finding("a decoded parameter longer than the query");
}

}  // namespace

void http_options(std::string_view input) {
  if (input.empty()) return;
  const auto which = static_cast<unsigned char>(input[0]);
  const std::string_view text = input.substr(1);
  switch (which % 6) {
    case 0:
      return url(text);
    case 1:
      return ip(text);
    case 2:
      return identity(text, static_cast<unsigned char>(which / 6));
    case 3:
      return retry_after(text);
    case 4:
      return source_options(text);
    default:
      return query(text);
  }
}

}  // namespace rc::fuzz
