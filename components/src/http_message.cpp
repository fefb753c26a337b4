// HTTP messages without a network: the request and response types, how a finished run becomes a
// response (statuses, RateLimit headers, Retry-After), and the wire form the server writes.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>

#include "http_internal.hpp"
#include "rc/error.hpp"
#include "rc/http_rate_limit_headers.hpp"

namespace rc {

using http_detail::iequals;

namespace {
/// JSON text for the wire: invalid UTF-8 is replaced, never thrown about.
std::string wire_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// wire_json(j), written over `out`: what dump() does, with this thread's serializer and buffer
/// instead of a new adapter, locale lookup and string per response.
void wire_json_into(std::string& out, const nlohmann::json& j) {
  using serializer = nlohmann::detail::serializer<nlohmann::json>;
  thread_local std::string text;
  thread_local serializer writer(nlohmann::detail::output_adapter<char, std::string>(text), ' ',
                                 nlohmann::json::error_handler_t::replace);
  text.clear();
  writer.dump(j, false, false, 0);
  out.assign(text);
}
}  // namespace

const std::string* find_http_header(const http_headers& headers, std::string_view name) noexcept {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return &v;
  return nullptr;
}

std::optional<std::string> http_request::query_param(std::string_view name) const {
  std::string_view rest = query;
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view{} : rest.substr(amp + 1);
    const auto eq = pair.find('=');
    const std::string key = http_detail::percent_decode(pair.substr(0, eq), true);
    if (key != name) continue;
    return eq == std::string_view::npos ? std::string() : http_detail::percent_decode(pair.substr(eq + 1), true);
  }
  return std::nullopt;
}

std::string http_request::param(std::string_view name) const {
  for (const auto& [k, v] : params)
    if (k == name) return v;
  return {};
}

http_response json_response(const nlohmann::json& body, int status) {
  http_response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = wire_json(body);
  return r;
}

http_response text_response(std::string body, int status) {
  http_response r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(body);
  return r;
}

void to_json(nlohmann::json& j, const http_request& r) {
  j = {{"method", r.method}, {"target", r.target}, {"path", r.path},
       {"query", r.query},   {"client", r.client}, {"peer", r.peer}};
  if (!r.params.empty()) {
    auto params = nlohmann::json::object();
    for (const auto& [k, v] : r.params) params[k] = v;
    j["params"] = std::move(params);
  }
  auto headers = nlohmann::json::object();
  for (const auto& [k, v] : r.headers) headers[k] = v;
  j["headers"] = std::move(headers);
  if (r.json)
    j["json"] = *r.json;
  else if (!r.body.empty())
    j["body"] = r.body;
}

void to_json(nlohmann::json& j, const http_response& r) {
  j = {{"status", r.status}};
  if (!r.url.empty()) j["url"] = r.url;
  auto headers = nlohmann::json::object();
  for (const auto& [k, v] : r.headers) headers[k] = v;
  j["headers"] = std::move(headers);
  if (r.json)
    j["json"] = *r.json;
  else
    j["body"] = r.body;
}

void set_http_status(exchange& ex, int status) {
  if (status < 100 || status > 599) invalid_option("set_http_status", "status", "an HTTP status in [100, 599]", status);
  ex.set_header(http_status_header, status);
}

void set_http_header(exchange& ex, std::string_view name, std::string_view value) {
  nlohmann::json list = nlohmann::json::array();
  if (const auto* existing = ex.header(http_response_headers_header); existing && existing->is_array())
    list = *existing;
  list.push_back(nlohmann::json::array({name, value}));
  ex.set_header(http_response_headers_header, std::move(list));
}

void http_server_options::validate() const {
  if (max_header_bytes < 256 || max_header_bytes > (1U << 30))
    invalid_option("http_source", "server.max_header_bytes", "in [256, 2^30]", max_header_bytes);
  if (max_body_bytes > (std::size_t{1} << 40))
    invalid_option("http_source", "server.max_body_bytes", "at most 2^40", max_body_bytes);
  if (read_timeout <= duration::zero())
    invalid_option("http_source", "server.read_timeout", "a duration > 0", ms_text(read_timeout));
  if (idle_timeout <= duration::zero())
    invalid_option("http_source", "server.idle_timeout", "a duration > 0", ms_text(idle_timeout));
  if (write_timeout <= duration::zero())
    invalid_option("http_source", "server.write_timeout", "a duration > 0", ms_text(write_timeout));
  if (max_connections < 1) invalid_option("http_source", "server.max_connections", "at least 1", max_connections);
  if (ipv6_prefix < 1 || ipv6_prefix > 128)
    invalid_option("http_source", "server.ipv6_prefix", "an integer in [1, 128]", ipv6_prefix);
  (void)http_detail::client_resolver(*this);  // throws RC5003 for a bad trusted_proxies entry
}

void http_source_options::validate() const {
  if (!http_detail::parse_ip(host) && host != "localhost")
    invalid_option("http_source", "host", "an IP address or \"localhost\"", fmt::format("\"{}\"", host));
  if (path.empty() || path.front() != '/')
    invalid_option("http_source", "path", "a path starting with '/'", fmt::format("\"{}\"", path));
  if (method.empty() || std::any_of(method.begin(), method.end(), [](char c) {
        return !(std::isupper(static_cast<unsigned char>(c)) || c == '-' || c == '*');
      }))
    invalid_option("http_source", "method", "an upper-case HTTP method or \"*\"", fmt::format("\"{}\"", method));
  if (response_timeout && *response_timeout <= duration::zero())
    invalid_option("http_source", "response_timeout", "a duration > 0", ms_text(*response_timeout));
  server.validate();
  http_detail::validate_builtin_paths(*this);
  if (tls) {
    http_detail::require_readable_file("http_source", "tls.cert_file", tls->cert_file);
    http_detail::require_readable_file("http_source", "tls.key_file", tls->key_file);
  }
}

void http_options::validate() const {
  if (!url_from) (void)http_detail::parse_url(url);
  if (method.empty()) invalid_option("http", "method", "an HTTP method", "\"\"");
  if (timeout <= duration::zero()) invalid_option("http", "timeout", "a duration > 0", ms_text(timeout));
  if (max_response_bytes < 1) invalid_option("http", "max_response_bytes", "at least 1", max_response_bytes);
  if (!tls.ca_file.empty()) http_detail::require_readable_file("http", "tls.ca_file", tls.ca_file);
}

namespace http_detail {

void validate_builtin_paths(const http_source_options& o) {
  const std::pair<std::string_view, const std::string*> paths[] = {
      {"metrics_path", &o.metrics_path}, {"health_path", &o.health_path}, {"ready_path", &o.ready_path}};
  for (std::size_t i = 0; i < std::size(paths); ++i) {
    const std::string& p = *paths[i].second;
    if (p.empty()) continue;
    if (p.front() != '/' || p.find_first_of("?#*: \t") != std::string::npos)
      invalid_option("http_source", paths[i].first, "a literal path starting with '/' (no '?', '#', ':' or '*')",
                     fmt::format("\"{}\"", p));
    for (std::size_t j = 0; j < i; ++j)
      if (*paths[j].second == p)
        invalid_option("http_source", paths[i].first, fmt::format("a path other than {}'s", paths[j].first),
                       fmt::format("\"{}\"", p));
  }
}

namespace {
// Each byte with ASCII letters lower-cased.
constexpr std::array<unsigned char, 256> ascii_lower = [] {
  std::array<unsigned char, 256> t{};
  for (std::size_t c = 0; c < t.size(); ++c)
    t[c] = static_cast<unsigned char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return t;
}();
}  // namespace

bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  if (std::memcmp(a.data(), b.data(), a.size()) == 0) return true;  // spelt alike: the usual match
  for (std::size_t i = 0; i < a.size(); ++i)
    if (ascii_lower[static_cast<unsigned char>(a[i])] != ascii_lower[static_cast<unsigned char>(b[i])]) return false;
  return true;
}

void require_readable_file(std::string_view op, std::string_view option, const std::string& file) {
  if (file.empty()) invalid_option(op, option, "a file name", "\"\"");
  std::ifstream in(file);
  if (!in) invalid_option(op, option, "a readable file", fmt::format("\"{}\"", file));
}

namespace {

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool valid_header_text(std::string_view s) noexcept {
  return std::memchr(s.data(), '\r', s.size()) == nullptr && std::memchr(s.data(), '\n', s.size()) == nullptr;
}

// RFC 9110 token characters, by byte.
constexpr std::array<bool, 256> token_chars = [] {
  std::array<bool, 256> t{};
  for (int c = 'a'; c <= 'z'; ++c) t[static_cast<std::size_t>(c)] = true;
  for (int c = 'A'; c <= 'Z'; ++c) t[static_cast<std::size_t>(c)] = true;
  for (int c = '0'; c <= '9'; ++c) t[static_cast<std::size_t>(c)] = true;
  for (char c : std::string_view("!#$%&'*+-.^_`|~")) t[static_cast<unsigned char>(c)] = true;
  return t;
}();

bool valid_header_name(std::string_view s) noexcept {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return token_chars[static_cast<unsigned char>(c)]; });
}

// Headers the server owns: a forwarded response must not bring its own framing.
bool hop_by_hop(std::string_view name) noexcept {
  for (std::string_view h : {"connection", "keep-alive", "transfer-encoding", "content-length", "te", "trailer",
                             "upgrade", "proxy-authenticate", "proxy-authorization"})
    if (iequals(name, h)) return true;
  return false;
}

void append_json_headers(response_headers& out, const nlohmann::json& list) {
  // [[name, value], ...], [{"name":..,"value":..}, ...] or {name: value}
  if (list.is_object()) {
    for (const auto& [k, v] : list.items()) merge_header(out, k, v.is_string() ? v.get<std::string>() : wire_json(v));
    return;
  }
  if (!list.is_array()) return;
  for (const auto& item : list) {
    if (item.is_array() && item.size() == 2 && item[0].is_string()) {
      merge_header(out, item[0].get<std::string>(),
                   item[1].is_string() ? item[1].get<std::string>() : wire_json(item[1]));
    } else if (item.is_object() && item.contains("name") && item.contains("value")) {
      const auto& v = item["value"];
      merge_header(out, item["name"].get<std::string>(), v.is_string() ? v.get<std::string>() : wire_json(v));
    }
  }
}

void apply_limit_notes(response_headers& out, const exchange& ex) {
  bool first = out.empty();
  for (const auto& note : ex.limit_notes()) {
    // Every header a note makes is a fixed name with digits and fixed text, but for draft-8's
    // policy name, which is the user's.
    const bool checked = !includes(note.header_mode, rate_limit_headers::draft_8);
    if (first && checked)  // one note's headers have distinct names: with nothing before them, nothing to merge
      each_rate_limit_header(note, [&out](std::string_view k, std::string_view v) { out.emplace_back_checked(k, v); });
    else if (first)
      each_rate_limit_header(note, [&out](std::string_view k, std::string_view v) { out.emplace_back(k, v); });
    else
      each_rate_limit_header(note, [&out](std::string_view k, std::string_view v) { merge_header(out, k, v); });
    first = first && out.empty();
  }
}

void body_response(exchange& ex, response_parts& r) {
  any_body& body = ex.raw_body();
  if (body.holds<http_response>()) {
    auto& res = body.get<http_response>();
    if (res.status < 100 || res.status > 599) {  // not a status: the route is wrong, the client gets no detail
      r.status = 500;
      r.body = error_body(code_string(errc::misconfigured), "Internal Server Error");
      r.content_type = "application/json";
      return;
    }
    r.status = res.status;
    r.content_type = std::move(res.content_type);
    r.body = std::move(res.body);
    if (r.body.empty() && res.json) {
      wire_json_into(r.body, *res.json);
      if (r.content_type.empty()) r.content_type = "application/json";
    }
    for (auto& [k, v] : res.headers) {
      if (hop_by_hop(k)) continue;
      if (iequals(k, "content-type")) {
        if (r.content_type.empty()) r.content_type = v;
        continue;
      }
      r.headers.emplace_back(k, v);
    }
    if (!r.body.empty() && r.content_type.empty()) r.content_type = "text/plain; charset=utf-8";
    return;
  }
  if (body.holds<std::string>()) {
    r.body = std::move(body.get<std::string>());
    r.content_type = "text/plain; charset=utf-8";
    return;
  }
  if (!body.has_value() || body.holds<http_request>()) {
    r.status = 204;
    return;
  }
  nlohmann::json j = body.holds<nlohmann::json>() ? std::move(body.get<nlohmann::json>()) : body.to_json();
  if (j.is_null()) {
    r.status = 204;
    return;
  }
  wire_json_into(r.body, j);
  r.content_type = "application/json";
}

// The status and body of a refusal; its headers are added by response_for, over the notes.
// Single fields through detail(): a gate's deferred refusal answers them without building details.
void refusal_response(const error& err, response_parts& r) {
  r.status = 429;
  if (const auto* it = err.detail("status"); it && it->is_number_integer()) {
    const int s = it->get<int>();
    if (s >= 400 && s <= 599) r.status = s;
  }
  if (const auto* it = err.detail("message"); it && !it->is_null()) {
    if (it->is_string()) {
      r.body.assign(it->get_ref<const std::string&>());  // into the connection's buffer: no copy made aside
      r.content_type = "text/plain; charset=utf-8";
    } else {
      r.body = wire_json(*it);
      r.content_type = "application/json";
    }
  } else {
    r.body = error_body(err.code_string(), err.message());
    r.content_type = "application/json";
  }
}

void refusal_headers(const error& err, const exchange& ex, response_headers& out) {
  // A gate that refused and noted it (rate_limit) put the refusal's headers on its note already.
  const bool noted =
      std::any_of(ex.limit_notes().begin(), ex.limit_notes().end(), [](const limit_note& n) { return n.rejected; });
  if (!noted)
    if (const auto* it = err.detail("headers")) append_json_headers(out, *it);
  if (!out.has(response_headers::known::retry_after)) {
    double ms = 0;
    if (const auto* it = err.detail("retry_after_ms"); it && it->is_number()) ms = it->get<double>();
    const auto seconds = static_cast<long long>(std::ceil(std::max(0.0, ms) / 1000.0 - 1e-9));
    out.emplace_back("Retry-After", std::to_string(std::max(0LL, seconds)));
  }
}

/// The status and body of a failed run; returns the refusal when it was one (RC5013).
const error* failure_response(const std::exception_ptr& failure, response_parts& r) {
  r.content_type = "application/json";
  const error* err = error_of(failure);  // the executor normalised it: an rc::error, read in place
  if (err && err->code() == errc::rate_limited) {
    refusal_response(*err, r);
    return err;
  }
  if (err && err->code() == errc::validation) {
    r.status = 400;
    r.body = error_body(err->code_string(), err->message());
  } else {
    r.status = 500;
    r.body = error_body(err ? err->code_string() : code_string(errc::step_failed), "Internal Server Error");
  }
  return nullptr;
}

}  // namespace

std::string percent_decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%' && i + 2 < text.size()) {
      const int hi = hex_value(text[i + 1]), lo = hex_value(text[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += (plus_is_space && c == '+') ? ' ' : c;
  }
  return out;
}

bool is_json_content_type(std::string_view ct) noexcept {
  const auto semi = ct.find(';');
  std::string_view media = ct.substr(0, semi);
  while (!media.empty() && media.back() == ' ') media.remove_suffix(1);
  while (!media.empty() && media.front() == ' ') media.remove_prefix(1);
  if (iequals(media, "application/json")) return true;
  return media.size() > 5 && iequals(media.substr(media.size() - 5), "+json");
}

std::string_view reason_phrase(int status) noexcept {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return status < 400 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

std::string error_body(std::string_view code, std::string_view message) {
  return wire_json(nlohmann::json{{"code", code}, {"message", message}});
}

response_parts error_response(int status, std::string_view code, std::string_view message) {
  response_parts r;
  r.status = status;
  r.content_type = "application/json";
  r.body = error_body(code, message);
  return r;
}

void merge_header(response_headers& out, std::string_view name, std::string_view value) {
  const bool structured =
      !value.empty() && value.front() == '"' && (iequals(name, "RateLimit") || iequals(name, "RateLimit-Policy"));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto [k, v] = out[i];
    if (k.size() != name.size() || !iequals(k, name)) continue;
    if (v == value) return;
    if (structured && !v.empty() && v.front() == '"') continue;  // draft-8: several limiters, several values
    out.set_value(i, value);
    return;
  }
  out.emplace_back(name, value);
}

void response_for(outcome& result, exchange& ex, response_parts& r) {
  r.reset();
  const error* refusal = nullptr;
  if (result.ok()) {
    body_response(ex, r);
    if (const auto* s = ex.header(http_status_header); s && s->is_number_integer()) {
      const int status = s->get<int>();
      if (status >= 100 && status <= 599) r.status = status;
    }
  } else if (result.is_drop()) {
    r.status = 204;
  } else {
    refusal = failure_response(result.error, r);
  }
  // The gates' headers, on every response, success or not; then a refusal's own (the latest
  // word: they go over the notes), with Retry-After always on a refusal.
  apply_limit_notes(r.headers, ex);
  if (refusal) refusal_headers(*refusal, ex, r.headers);
  if (const auto* extra = ex.header(http_response_headers_header)) append_json_headers(r.headers, *extra);
}

void serialize_response(std::string& out, const response_parts& r, bool head, bool keep_alive, bool http10) {
  // Sized once for the longest it can be, written through a pointer, trimmed at the end: no
  // reallocation, no length lookups, however many headers.
  using namespace std::string_view_literals;
  const bool no_body = r.status == 204 || r.status == 304 || (r.status >= 100 && r.status < 200);
  const bool with_body = !head && !no_body;
  const bool date = !r.headers.has(response_headers::known::date);
  const std::string_view date_text = date ? current_http_date() : std::string_view();
  const std::string_view reason = reason_phrase(r.status);
  const bool content_type = !no_body && !r.content_type.empty() && valid_header_text(r.content_type);
  // The fixed text (status line, the names, separators, Connection, the blank line) is under
  // 120 bytes; numbers are at most 20 digits each.
  constexpr std::size_t fixed = 160;
  std::size_t size = fixed + reason.size() + date_text.size() + r.content_type.size() + (with_body ? r.body.size() : 0);
  for (const auto& [k, v] : r.headers) size += k.size() + v.size() + 4;
  const std::size_t start = out.size();
  out.resize(start + size);
  char* p = out.data() + start;
  const auto put = [&p](std::string_view text) {
    std::memcpy(p, text.data(), text.size());
    p += text.size();
  };
  const auto number = [&p](std::uint64_t n) { p = std::to_chars(p, p + 20, n).ptr; };
  put(http10 ? "HTTP/1.0 "sv : "HTTP/1.1 "sv);
  number(static_cast<std::uint64_t>(r.status));
  *p++ = ' ';
  put(reason);
  put("\r\n"sv);
  if (date) {
    put("Date: "sv);
    put(date_text);
    put("\r\n"sv);
  }
  if (!no_body) {
    if (content_type) {
      put("Content-Type: "sv);
      put(r.content_type);
      put("\r\n"sv);
    }
    put("Content-Length: "sv);
    number(r.body.size());
    put("\r\n"sv);
  }
  if (!keep_alive)
    put("Connection: close\r\n"sv);
  else if (http10)
    put("Connection: keep-alive\r\n"sv);
  for (std::size_t i = 0; i < r.headers.size(); ++i) {
    const auto [k, v] = r.headers[i];
    if (!r.headers.checked(i) && (!valid_header_name(k) || !valid_header_text(v))) continue;
    put(k);
    put(": "sv);
    put(v);
    put("\r\n"sv);
  }
  put("\r\n"sv);
  if (with_body) put(r.body);
  out.resize(static_cast<std::size_t>(p - out.data()));
}

std::int64_t wall_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string_view current_http_date() {
  thread_local std::int64_t cached_second = -1;
  thread_local std::string cached;
  const std::int64_t ms = wall_now_ms();
  if (ms / 1000 != cached_second) {
    cached_second = ms / 1000;
    cached = http_date(cached_second * 1000);
  }
  return cached;
}

std::optional<double> parse_retry_after(std::string_view value, std::int64_t wall_now_epoch_ms) {
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  if (value.empty()) return std::nullopt;
  if (std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    if (value.size() > 10) return std::nullopt;
    return static_cast<double>(std::stoll(std::string(value))) * 1000.0;
  }
  // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
  std::tm tm{};
  char weekday[4] = {}, month[4] = {}, zone[4] = {};
  const std::string text(value);
  if (std::sscanf(text.c_str(), "%3s %d %3s %d %d:%d:%d %3s", weekday, &tm.tm_mday, month, &tm.tm_year, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, zone) != 8)
    return std::nullopt;
  static constexpr std::string_view months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  int mon = -1;
  for (int i = 0; i < 12; ++i)
    if (months[i] == month) mon = i;
  if (mon < 0) return std::nullopt;
  tm.tm_mon = mon;
  tm.tm_year -= 1900;
  const std::int64_t epoch_ms = static_cast<std::int64_t>(timegm(&tm)) * 1000;
  return static_cast<double>(std::max<std::int64_t>(0, epoch_ms - wall_now_epoch_ms));
}

url_parts parse_url(std::string_view url) {
  auto bad = [&](std::string_view rule) { invalid_option("http", "url", rule, fmt::format("\"{}\"", url)); };
  const bool tls = url.size() >= 8 && iequals(url.substr(0, 8), "https://");
  const std::string_view scheme = tls ? "https://" : "http://";
  if (url.size() < scheme.size() || !iequals(url.substr(0, scheme.size()), scheme)) bad("an http:// or https:// URL");
  std::string_view rest = url.substr(scheme.size());
  const auto slash = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, slash);
  std::string_view target = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) bad("a URL without user info");
  url_parts u;
  u.tls = tls;
  u.port = tls ? 443 : 80;
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) bad("a URL with a valid host");
    u.host = std::string(authority.substr(1, close - 1));
    const auto after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') bad("a URL with a valid host");
      port_text = after.substr(1);
    }
  } else {
    const auto colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (u.host.empty()) bad("a URL with a host");
  if (!port_text.empty()) {
    if (port_text.size() > 5 ||
        !std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; }))
      bad("a URL with a valid port");
    const int port = std::stoi(std::string(port_text));
    if (port < 1 || port > 65535) bad("a URL with a port in [1, 65535]");
    u.port = static_cast<std::uint16_t>(port);
  }
  u.target = target.empty() ? "/" : (target.front() == '?' ? "/" + std::string(target) : std::string(target));
  const bool v6 = u.host.find(':') != std::string::npos;
  u.host_header = (v6 ? "[" + u.host + "]" : u.host) + (u.port == (tls ? 443 : 80) ? "" : ":" + std::to_string(u.port));
  return u;
}

}  // namespace http_detail
}  // namespace rc
