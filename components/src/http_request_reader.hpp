// Bytes to HTTP requests, without a socket: the server's connection feeds what it reads into a
// request_reader and gets back a complete request, a refusal, or "read more". Everything a client
// controls on the way in is judged here (empty lines before a request, the header and body limits,
// framing by Transfer-Encoding and Content-Length, Host, chunk-size lines and trailers), so it can
// be tested and fuzzed with plain buffers (tests/fuzz/http_request_fuzz.cpp). Depends on Beast and
// fmt only: the fuzz target compiles it without the rest of the library.
#pragma once

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/verb.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rc::http_detail {

/// What to answer a request the reader refuses. The stream cannot be framed past it: the
/// connection closes after the response.
struct request_refusal {
  int status = 400;
  std::string_view code;  // a literal
  std::string message;
};

/// The bounds a reader holds a client to (the server's options; docs/http.md lists them).
struct request_limits {
  std::size_t max_header_bytes = 8 * 1024;
  std::uint64_t max_body_bytes = 1024 * 1024;
  std::size_t chunk_line_limit = 4 * 1024;  // a chunk-size line with its extensions
  std::size_t leading_blank_limit = 1024;   // empty-line bytes before a request line
};

/// A complete request as read: what the server makes its http_request of. The fields are in
/// arrival order with their names as sent (the same container type as http_request's headers, so
/// they move there without a copy).
struct parsed_request {
  boost::beast::http::verb method = boost::beast::http::verb::unknown;
  std::string method_text;  // as sent
  std::string target;       // as sent
  unsigned version = 11;    // 10 or 11
  bool keep_alive = true;   // the version and every Connection header considered
  // Looked up with rc::find_http_header (rc/http.hpp), here or once moved into an http_request.
  std::vector<std::pair<std::string, std::string>> fields;
  std::string body;
};

/// Beast's parser, writing what it parses straight into a parsed_request (no field index, no
/// allocation per field beyond the strings themselves), and noting as the fields go by what the
/// framing checks and the server ask of them.
class request_parser final : public boost::beast::http::basic_parser<true> {
 public:
  parsed_request& request() noexcept { return req_; }
  const parsed_request& request() const noexcept { return req_; }
  /// The first Expect field's value; empty when there is none.
  std::string_view expect() const noexcept { return expect_; }
  std::size_t hosts() const noexcept { return hosts_; }
  std::size_t content_lengths() const noexcept { return content_lengths_; }
  std::size_t transfer_encodings() const noexcept { return transfer_encodings_; }
  /// Every Transfer-Encoding value, in order, joined by commas (one list, as RFC 9110 reads them).
  std::string_view transfer_coding_list() const noexcept { return codings_; }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;
  void on_request_impl(boost::beast::http::verb method, string_view method_str, string_view target, int version,
                       error_code& ec) override;
  void on_response_impl(int, string_view, int, error_code& ec) override;
  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length, error_code& ec) override;
  std::size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t size, string_view extensions, error_code& ec) override;
  std::size_t on_chunk_body_impl(std::uint64_t remain, string_view body, error_code& ec) override;
  void on_finish_impl(error_code& ec) override;

  parsed_request req_;
  std::string expect_;
  bool expect_seen_ = false;
  std::string codings_;
  std::size_t hosts_ = 0, content_lengths_ = 0, transfer_encodings_ = 0;
};

class request_reader {
 public:
  enum class result : std::uint8_t { need_more, request, refused };

  explicit request_reader(const request_limits& limits) : limits_(limits) {}

  /// Parses what it can from the front of `in`, consuming what it uses: `request` once a request
  /// is complete (take it with take(); bytes after it stay in `in`), `refused` with `why` filled,
  /// or `need_more` when nothing more can be done with `in` until more bytes arrive. A request
  /// starts (started()) with its first byte that is not part of an empty line.
  result parse(boost::beast::flat_buffer& in, request_refusal& why);

  bool started() const noexcept { return parser_.has_value(); }
  /// Empty-line bytes skipped since the last complete request.
  std::size_t blank_bytes() const noexcept { return blank_; }
  /// The request being read; only while started().
  const request_parser& current() const noexcept { return *parser_; }
  /// The complete request; the reader is then ready for the next one.
  parsed_request take();
  /// Forgets the request being read (after a refusal or a timeout).
  void reset() noexcept { parser_.reset(); }

 private:
  bool skip_blank_lines(boost::beast::flat_buffer& in, request_refusal& why);
  bool header_acceptable(request_refusal& why) const;
  bool pending_chunk_lines_acceptable(const boost::beast::flat_buffer& in, request_refusal& why) const;
  void parse_error(boost::beast::error_code ec, request_refusal& why) const;

  request_limits limits_;
  std::optional<request_parser> parser_;
  std::size_t blank_ = 0;
  std::size_t header_bytes_ = 0;  // of the current request's header, consumed by the parser
  bool header_checked_ = false;   // header_acceptable() has judged the current request
};

}  // namespace rc::http_detail
