// Internals shared by the HTTP server and client: client identity, response building and
// serialisation, URLs. Plain C++ (no Beast, no Asio), so the rules are cheap to compile and test.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "rc/http.hpp"
#include "rc/route.hpp"

namespace rc::http_detail {

/// A callable passed down for the length of one call, without a std::function's allocation.
template <class Signature>
class function_ref;
template <class R, class... Args>
class function_ref<R(Args...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, function_ref>>>
  function_ref(F&& f) noexcept  // NOLINT(google-explicit-constructor): lambdas convert
      : object_(const_cast<void*>(static_cast<const void*>(&f))), call_([](void* o, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

/// rate_limit_headers_of(note) without building a list: calls emit(name, value) for each header,
/// in the same order and bytes. A value is valid only during its call.
void each_rate_limit_header(const limit_note& note, function_ref<void(std::string_view, std::string_view)> emit);

// ---- addresses ------------------------------------------------------------------------------

struct ip_address {
  std::array<std::uint8_t, 16> bytes{};  // IPv4 in the first 4
  bool v4 = false;
};

/// "1.2.3.4", "::1", "[::1]"; an IPv4-mapped IPv6 address becomes IPv4. Ports are not accepted.
std::optional<ip_address> parse_ip(std::string_view text);
std::string format_ip(const ip_address& a);

struct ip_block {
  ip_address base;
  int prefix = 0;
  bool contains(const ip_address& a) const noexcept;
};

/// The trusted-proxy rules of one server, parsed once.
class client_resolver {
 public:
  /// Throws RC5003 for an entry that is not an address, a CIDR block or a known name.
  explicit client_resolver(const http_server_options& options);
  bool trusts_anyone() const noexcept { return !trusted_.empty(); }
  bool trusted(const ip_address& a) const noexcept;
  /// The identity of a request from `peer` carrying `headers`.
  http_client_identity resolve(const ip_address& peer, const http_headers& headers) const;
  /// The rate-limit key of an address: IPv4 as is, IPv6 masked to the prefix ("2001:db8::/56").
  std::string key_of(const ip_address& a) const;

 private:
  std::vector<ip_block> trusted_;
  proxy_header header_;
  int ipv6_prefix_;
};

// ---- responses ------------------------------------------------------------------------------

bool iequals(std::string_view a, std::string_view b) noexcept;

/// A response's extra headers: names and values back to back in one buffer, each entry their
/// offsets. The connection reuses one response_parts from request to request: clear() keeps the
/// buffer and the entry list (and their capacity), so a steady stream of responses allocates
/// nothing here, and adding a header is two copies into the buffer.
class response_headers {
 public:
  struct field {
    std::string_view name;
    std::string_view value;
  };
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = field;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = field;
    iterator(const response_headers* h, std::size_t i) noexcept : h_(h), i_(i) {}
    field operator*() const noexcept { return (*h_)[i_]; }
    iterator& operator++() noexcept {
      ++i_;
      return *this;
    }
    iterator operator++(int) noexcept { return iterator(h_, i_++); }
    bool operator==(const iterator& o) const noexcept { return i_ == o.i_; }

   private:
    const response_headers* h_;
    std::size_t i_;
  };

  void emplace_back(std::string_view name, std::string_view value) { add(name, value, false); }
  /// As emplace_back, for a header the server made itself of a token name and a value of digits
  /// and fixed text (a gate's RateLimit headers): serialize_response writes it without looking
  /// through its characters for ones a header may not hold.
  void emplace_back_checked(std::string_view name, std::string_view value) { add(name, value, true); }
  /// Replaces the value of the i-th header (the old bytes stay unused until clear()).
  void set_value(std::size_t i, std::string_view value) {
    entries_[i].value_at = append(value);
    entries_[i].value_size = static_cast<std::uint32_t>(value.size());
    entries_[i].checked = false;
  }
  /// Whether the i-th header came by emplace_back_checked (and was not replaced since).
  bool checked(std::size_t i) const noexcept { return entries_[i].checked; }
  field operator[](std::size_t i) const noexcept {
    const entry& e = entries_[i];
    return {std::string_view(text_.data() + e.name_at, e.name_size),
            std::string_view(text_.data() + e.value_at, e.value_size)};
  }
  iterator begin() const noexcept { return {this, 0}; }
  iterator end() const noexcept { return {this, entries_.size()}; }
  std::size_t size() const noexcept { return entries_.size(); }
  bool empty() const noexcept { return entries_.empty(); }
  void clear() noexcept {
    entries_.clear();
    text_.clear();
    present_ = 0;
  }
  /// The headers every response asks about: whether one is among them is kept as they are added
  /// (names never change), not looked for. Date: serialize_response writes one otherwise;
  /// Retry-After: a refusal adds one otherwise.
  enum class known : std::uint8_t { date = 1, retry_after = 2 };
  bool has(known name) const noexcept { return (present_ & static_cast<std::uint8_t>(name)) != 0; }

 private:
  struct entry {
    std::uint32_t name_at, name_size, value_at, value_size;
    bool checked;
  };
  void add(std::string_view name, std::string_view value, bool checked) {
    entries_.push_back({append(name), static_cast<std::uint32_t>(name.size()), append(value),
                        static_cast<std::uint32_t>(value.size()), checked});
    present_ |= known_bit(name);
  }
  static std::uint8_t known_bit(std::string_view name) noexcept {
    if (name.size() == 4 && iequals(name, "Date")) return static_cast<std::uint8_t>(known::date);
    if (name.size() == 11 && iequals(name, "Retry-After")) return static_cast<std::uint8_t>(known::retry_after);
    return 0;
  }
  std::uint32_t append(std::string_view text) {
    const auto at = static_cast<std::uint32_t>(text_.size());
    text_.append(text);
    return at;
  }
  std::string text_;
  std::vector<entry> entries_;
  std::uint8_t present_ = 0;  // known bits
};

struct response_parts {
  int status = 200;
  std::string content_type;
  std::string body;
  response_headers headers;

  /// Back to a fresh 200 with nothing in it, keeping the buffers.
  void reset() noexcept {
    status = 200;
    content_type.clear();
    body.clear();
    headers.clear();
  }
};

std::string_view reason_phrase(int status) noexcept;

/// {"code": ..., "message": ...}
std::string error_body(std::string_view code, std::string_view message);
response_parts error_response(int status, std::string_view code, std::string_view message);

/// The response for a finished run, into `r` (reset first): the final body on success, the
/// mapped status on failure, plus the headers the gates attached. Consumes the exchange's body.
void response_for(outcome& result, exchange& ex, response_parts& r);

/// Adds a rate-limit header the way express-rate-limit composes several limiters: draft-8
/// structured values (quoted policy names) append, anything else replaces the earlier value;
/// an identical name and value is kept once.
void merge_header(response_headers& out, std::string_view name, std::string_view value);

/// "HTTP/1.1 <status> <reason>", Date (unless the headers carry one), Content-Type, Content-Length,
/// Connection, the headers; then the body unless `head`. Header lines with CR or LF are skipped.
void serialize_response(std::string& out, const response_parts& r, bool head, bool keep_alive, bool http10);

/// The current time as an IMF-fixdate, cached per second (per thread).
std::string_view current_http_date();
/// Wall-clock milliseconds since the Unix epoch.
std::int64_t wall_now_ms();

/// Retry-After (delta-seconds or an HTTP date) in milliseconds from now; nothing if unparsable.
std::optional<double> parse_retry_after(std::string_view value, std::int64_t wall_now_epoch_ms);

/// Whether a content type says JSON (application/json, anything/+json).
bool is_json_content_type(std::string_view content_type) noexcept;

// ---- URLs -----------------------------------------------------------------------------------

struct url_parts {
  std::string host;         // without brackets
  std::uint16_t port = 80;  // 443 for https
  bool tls = false;         // https://
  std::string target;       // "/path?query"
  std::string host_header;  // "host:port" as the Host header wants it
};

/// Parses "http[s]://host[:port][/path][?query]"; RC5003 for anything else.
url_parts parse_url(std::string_view url);

std::string percent_decode(std::string_view text, bool plus_is_space);

bool iequals(std::string_view a, std::string_view b) noexcept;

// ---- metrics ----------------------------------------------------------------------------------

/// One HTTP server's counters as read for a scrape.
struct listener_snapshot {
  std::string listener;                                  // "127.0.0.1:8080", "[::1]:8080"
  std::vector<std::pair<int, std::uint64_t>> responses;  // status -> responses sent, ascending
  std::size_t connections = 0;                           // open now
};
/// The context's HTTP servers (http_server.cpp).
std::vector<listener_snapshot> listener_snapshots(context& ctx);
/// The built-in endpoint paths of `o` are well formed (validate()).
void validate_builtin_paths(const http_source_options& o);

/// RC5003 naming `option` of `op` unless `file` can be opened for reading.
void require_readable_file(std::string_view op, std::string_view option, const std::string& file);

}  // namespace rc::http_detail
