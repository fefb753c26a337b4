// Bytes to HTTP requests, without a socket: the server's connection feeds what it reads into a
// request_reader and gets back a complete request, a refusal, or "read more". Everything a client
// controls on the way in is judged here (empty lines before a request, the header and body limits,
// framing by Transfer-Encoding and Content-Length, Host, chunk-size lines and trailers), so it can
// be tested and fuzzed with plain buffers (tests/fuzz/http_request_fuzz.cpp). Depends on Beast and
// fmt only: the fuzz target compiles it without the rest of the library.
#pragma once

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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

class request_reader {
 public:
  using parser_type = boost::beast::http::request_parser<boost::beast::http::string_body>;
  using request_type = parser_type::value_type;
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
  const parser_type& current() const noexcept { return *parser_; }
  /// The complete request; the reader is then ready for the next one.
  request_type take();
  /// Forgets the request being read (after a refusal or a timeout).
  void reset() noexcept { parser_.reset(); }

 private:
  bool skip_blank_lines(boost::beast::flat_buffer& in, request_refusal& why);
  bool header_acceptable(request_refusal& why) const;
  bool pending_chunk_lines_acceptable(const boost::beast::flat_buffer& in, request_refusal& why) const;
  void parse_error(boost::beast::error_code ec, request_refusal& why) const;

  request_limits limits_;
  std::optional<parser_type> parser_;
  std::size_t blank_ = 0;
  std::size_t header_bytes_ = 0;  // of the current request's header, consumed by the parser
  bool header_checked_ = false;   // header_acceptable() has judged the current request
};

}  // namespace rc::http_detail
