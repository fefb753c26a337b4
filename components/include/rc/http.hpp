// HTTP/1.1 on Boost.Beast: rc::http_source({...}) puts routes in front of real clients, rc::http({...})
// calls HTTP services from a route. No Beast or Asio here: both live in components/src.
//
// Server (rc::http_source). One server per (host, port) and context, shared by every route that
// names it; requests are routed by method and path ("/items/:id" captures a segment, a trailing
// "/*" matches the rest; the most literal pattern wins). HTTP/1.1 keep-alive. The request is the
// exchange body (rc::http_request: method, target, path, query, headers, body as text and as JSON
// when the content type says JSON, the peer and the resolved client; an X-Correlation-Id header
// becomes the exchange's correlation id). The route's final body is the response:
//   rc::http_response          as given (status, content type, headers, body; `json` when body empty)
//   std::string                200 text/plain
//   nlohmann::json, or any type that converts to it   200 application/json (null: 204)
//   the request itself, or nothing                    204
// rc::set_http_status(ex, 201) / rc::set_http_header(ex, name, value) adjust it from the pipeline.
// Failures: RC5013 (throttle, slow_down, rate_limit refusals) is 429 with Retry-After (whole seconds,
// rounded up) and the gate's RateLimit headers; RC5002 and a JSON body that does not parse are 400;
// anything else is 500 {"code", "message"} with a generic message. The headers gates attach to the
// exchange (limit_notes) go on every response, success or not. A dropped exchange is 204.
//
// Limits that keep the server alive (http_server_options): header size (431), body size (413), the
// whole request within read_timeout from its first byte (408, against slowloris), idle keep-alive
// connections closed after idle_timeout, at most max_connections (further ones get 503). A client
// that disconnects while its exchange is in flight fires the exchange's abort_signal(): a gate
// waiting for it gives its slot back and drops it ("client-gone"); nothing is written.
//
// Client identity: the peer address, unless the peer is one of `trusted_proxies`; then the
// right-most untrusted address of X-Forwarded-For (or Forwarded, per `forwarded_header`). Headers
// from anyone else are ignored, so a client cannot choose its own key. IPv6 clients are grouped by
// `ipv6_prefix` (default /56). The key is on the exchange (header rc::client_header,
// "routecraft.client"): rc::by_client() is the key selector of a per-client gate.
//
// Client (rc::http). `.to(rc::http({...}))` sends and keeps the body; `.request<rc::http_response>(
// rc::http({...}))` makes the response the body. URL static or computed from the exchange; JSON or
// text bodies; a keep-alive connection pool per host; a timeout per call (and the exchange's
// deadline); non-2xx is an rc::error with details {status, url, method[, retry_after_ms]}:
// 5xx and 429 retryable, others not. A Retry-After on 429 or 503 becomes retry_after_ms, which
// rc::retry waits at least. The call is abandoned when the exchange's abort_signal() fires.
//
// Operability (docs/http.md, "Metrics, health and readiness"): `.metrics_path`, `.health_path`
// and `.ready_path` switch on built-in GET endpoints on the route's server: the context's
// counters as Prometheus text (rc/prometheus.hpp), 200 while the process serves, and 200 only
// once every route of the context has started (503 before, and from stop() on). They are server
// settings, answered before any route; a route with the same literal path fails to start.
//
// HTTPS (docs/http.md, "HTTPS"): `.tls = rc::tls_server{cert, key}` serves TLS 1.2+ on the
// server; the client uses TLS for an https:// URL, verifying the peer against the system's CA
// store (or `tls.ca_file`) and its host name. A failed handshake or verification is RC5010.
//
// Both run on the context's io_context: they need a real-time context (not rc::virtual_time).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rc/endpoint.hpp"
#include "rc/events.hpp"
#include "rc/http_rate_limit_headers.hpp"
#include "rc/keys.hpp"
#include "rc/options.hpp"

namespace rc {

/// "plugin:http:request:completed": one per request the server answered. A component event: this
/// header registers it, so `ctx.on("plugin:http:request:completed", ...)` works wherever it is
/// included (rc/rc.hpp does).
inline const event_id http_request_completed = register_event("plugin:http:request:completed");
/// "plugin:http:tls:unverified": a warning, once per rc::http endpoint, when it makes its first
/// HTTPS connection with `tls.verify = false` (details: level "warn", url, message).
inline const event_id http_tls_unverified = register_event("plugin:http:tls:unverified");

using http_headers = std::vector<std::pair<std::string, std::string>>;

/// First value of a header, compared case-insensitively; null when absent.
const std::string* find_http_header(const http_headers& headers, std::string_view name) noexcept;

/// Exchange headers a pipeline sets to shape the response (see set_http_status / set_http_header).
inline constexpr std::string_view http_status_header = "routecraft.http.response.status";
inline constexpr std::string_view http_response_headers_header = "routecraft.http.response.headers";

/// One HTTP request, the body of exchanges from rc::http_source.
struct http_request {
  std::string method;   // "GET"
  std::string target;   // as sent: "/items/7?full=1"
  std::string path;     // "/items/7" (not decoded)
  std::string query;    // "full=1" (not decoded)
  http_headers params;  // path parameters by name (":id" -> "7"), decoded; "*" for a trailing wildcard
  http_headers headers;
  std::string body;
  std::optional<nlohmann::json> json;  // the body parsed, when the content type says JSON
  std::string peer;                    // the socket's remote address
  std::uint16_t peer_port = 0;
  std::string client;      // the client's address (the peer, or from a trusted proxy's header)
  std::string client_key;  // the key per-client limits use: `client`, IPv6 grouped by prefix

  const std::string* header(std::string_view name) const noexcept { return find_http_header(headers, name); }
  /// A query parameter, percent- and '+'-decoded (first occurrence); nothing when absent.
  std::optional<std::string> query_param(std::string_view name) const;
  /// A path parameter; empty when absent.
  std::string param(std::string_view name) const;
};

/// A response: what a route returns to choose everything, and what rc::http's call returns.
struct http_response {
  int status = 200;
  std::string body;
  std::string content_type;            // empty: text/plain for a body, none otherwise
  http_headers headers;                // extra headers (hop-by-hop ones are not forwarded)
  std::optional<nlohmann::json> json;  // client: the body parsed when JSON; server: sent when body is empty
  std::string url;                     // client: the URL called

  const std::string* header(std::string_view name) const noexcept { return find_http_header(headers, name); }
};

/// A JSON response (application/json).
http_response json_response(const nlohmann::json& body, int status = 200);
/// A text response (text/plain; charset=utf-8).
http_response text_response(std::string body, int status = 200);

void to_json(nlohmann::json& j, const http_request& r);
void to_json(nlohmann::json& j, const http_response& r);

/// Sets the response status from the pipeline (any body type).
void set_http_status(exchange& ex, int status);
/// Adds a response header from the pipeline.
void set_http_header(exchange& ex, std::string_view name, std::string_view value);

/// Which forwarding header a trusted proxy writes.
enum class proxy_header { x_forwarded_for, forwarded };

/// Settings of one server (host, port). Routes sharing a server must agree on them: the first
/// route to open the server sets them; a later route giving different non-default ones fails to
/// start (RC5003).
struct http_server_options {
  static constexpr std::size_t default_max_header_bytes = 8 * 1024;
  static constexpr std::size_t default_max_body_bytes = 1024 * 1024;
  static constexpr std::size_t default_max_connections = 10000;
  /// Fixed limits (docs/http.md lists what a client gets past each). A chunk-size line of a
  /// chunked request body, extensions included: 400 beyond (its trailers count against
  /// max_header_bytes, also 400 beyond).
  static constexpr std::size_t chunk_line_limit = 4 * 1024;
  /// Empty lines (CRLF) before a request line are skipped, up to this many bytes: 400 beyond.
  static constexpr std::size_t leading_blank_limit = 1024;

  std::size_t max_header_bytes = default_max_header_bytes;  // request line + headers: 431 beyond
  std::size_t max_body_bytes = default_max_body_bytes;      // 413 beyond
  duration read_timeout = std::chrono::seconds(10);         // a whole request, from its first byte: 408
  duration idle_timeout = std::chrono::seconds(5);          // keep-alive connection with no request: closed
  duration write_timeout = std::chrono::seconds(10);        // a response the client does not read: closed
  std::size_t max_connections = default_max_connections;    // more at once: 503 and close
  /// Addresses or CIDR blocks ("10.0.0.0/8", "::1", "loopback", "private") whose forwarding
  /// header is believed. Empty: the peer address is the client, whatever the headers say.
  std::vector<std::string> trusted_proxies;
  proxy_header forwarded_header = proxy_header::x_forwarded_for;
  int ipv6_prefix = 56;  // IPv6 clients share a key per /ipv6_prefix; 128 = per address

  bool operator==(const http_server_options&) const = default;
  void validate() const;
};

/// TLS for rc::http_source: PEM files, read when the route starts. TLS 1.2 is the oldest version
/// accepted.
struct tls_server {
  std::string cert_file;  // the certificate chain, leaf first
  std::string key_file;   // its private key (unencrypted)

  bool operator==(const tls_server&) const = default;
};

struct http_source_options {
  std::string host = "127.0.0.1";  // address to listen on ("0.0.0.0", "::" for all)
  std::uint16_t port = 0;          // 0: an ephemeral port, shared by the context's port-0 routes on host
  std::string path = "/";          // "/users/:id", "/files/*"
  std::string method = "GET";      // "*" for any; a GET route also answers HEAD
  /// Sets the exchange's deadline; a response not ready by then is 503 and the exchange's abort
  /// signal fires (waiting gates give their slot back).
  std::optional<duration> response_timeout;
  http_server_options server;
  /// HTTPS on this (host, port): every route sharing the server gives the same (RC5003
  /// otherwise); port-0 TLS routes share an ephemeral server apart from the plain ones.
  std::optional<tls_server> tls;
  /// Built-in endpoints of this route's server (GET and HEAD; empty: off). Once a route turns one
  /// on, the server answers it, before any route, while it serves; routes sharing the server may
  /// repeat the same path, not give another (RC5003).
  std::string metrics_path;  // the context's metrics, Prometheus text format 0.0.4
  std::string health_path;   // 200 "ok" while the process serves
  std::string ready_path;    // 200 once every route has started; 503 before, and once stop() is called

  void validate() const;
};

/// Who sent a request, from the peer address and the forwarding headers (see above).
struct http_client_identity {
  std::string address;
  std::string key;
};
http_client_identity resolve_http_client(std::string_view peer, const http_headers& headers,
                                         const http_server_options& options);

namespace detail {
struct http_source_state;
struct http_client_tls;
}  // namespace detail

/// The HTTP source. Copies share state: keep one to ask for the port after start().
class http_source_endpoint final : public source<http_request> {
 public:
  explicit http_source_endpoint(http_source_options options);

  std::string_view adapter() const override { return "http"; }
  bool finite() const noexcept override { return false; }
  task<void> run(source_context& sc) override;

  const http_source_options& options() const noexcept { return options_; }
  /// The port the server listens on, once the route has started (waits up to `wait`); throws the
  /// route's start error (e.g. RC5010 when the address is taken) or RC5011 after `wait`.
  std::uint16_t port(duration wait = std::chrono::seconds(5)) const;

 private:
  http_source_options options_;
  std::shared_ptr<detail::http_source_state> state_;
};

inline http_source_endpoint http_source(http_source_options options) {
  return http_source_endpoint(std::move(options));
}

/// TLS settings of rc::http, used for https:// URLs.
struct tls_client {
  /// Verify the server's certificate chain and host name. false accepts any certificate (a
  /// man in the middle included) and emits http_tls_unverified.
  bool verify = true;
  std::string ca_file;      // PEM CA certificates to trust instead of the system's store
  std::string server_name;  // the name sent (SNI) and verified; empty: the URL's host
};

struct http_options {
  static constexpr std::size_t default_max_response_bytes = 8 * 1024 * 1024;
  static constexpr std::size_t default_pool_size = 32;

  std::string url;                                       // "http://host:port/path?query", or https://
  std::function<std::string(const exchange&)> url_from;  // computed per exchange; wins over url
  std::string method = "GET";
  http_headers headers;
  /// The request body; default: none for GET, HEAD, DELETE and OPTIONS, else the exchange's body
  /// (a string as text, rc::http_request's body as it came, anything else as JSON).
  std::function<std::string(const exchange&)> body;
  std::string content_type;                     // default: from the body (application/json or text/plain)
  duration timeout = std::chrono::seconds(30);  // connect + send + receive; also capped by the deadline
  std::size_t max_response_bytes = default_max_response_bytes;
  std::size_t pool_size = default_pool_size;     // idle keep-alive connections kept per host
  duration pool_idle = std::chrono::seconds(4);  // an idle connection older than this is not reused
  bool throw_on_http_error = true;               // false: a non-2xx response is a result like any other
  tls_client tls;

  void validate() const;
};

/// The HTTP client: a destination (`.to`, body unchanged) and a request/reply endpoint
/// (`.request<rc::http_response>`).
class http_client_endpoint final : public destination_base {
 public:
  explicit http_client_endpoint(http_options options);

  std::string_view adapter() const override { return "http"; }
  bool synchronous() const noexcept override { return false; }
  task<void> send(exchange& ex, route_runtime& rt) override;
  /// Performs the call; the returned exchange's body is an rc::http_response.
  task<exchange> call(exchange& ex, route_runtime& rt);

  const http_options& options() const noexcept { return *options_; }

 private:
  std::shared_ptr<const http_options> options_;
  std::shared_ptr<detail::http_client_tls> tls_;  // the TLS context, made at the first https call
};

inline http_client_endpoint http(http_options options) { return http_client_endpoint(std::move(options)); }

}  // namespace rc
