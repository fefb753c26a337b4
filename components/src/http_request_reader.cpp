// Bytes to HTTP requests: the rules of http_request_reader.hpp, in the order a request meets them.
#include "http_request_reader.hpp"

#include <fmt/format.h>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>

namespace rc::http_detail {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

void request_parser::on_request_impl(bhttp::verb method, string_view method_str, string_view target, int version,
                                     error_code& ec) {
  req_.method = method;
  req_.method_text.assign(method_str.data(), method_str.size());
  req_.target.assign(target.data(), target.size());
  req_.version = static_cast<unsigned>(version);
  req_.fields.reserve(8);  // most clients send fewer: one allocation for the list
  ec = {};
}

void request_parser::on_response_impl(int, string_view, int, error_code& ec) { ec = bhttp::error::bad_version; }

void request_parser::on_field_impl(bhttp::field name, string_view name_string, string_view value, error_code& ec) {
  hosts_ += name == bhttp::field::host;
  content_lengths_ += name == bhttp::field::content_length;
  if (name == bhttp::field::transfer_encoding) {
    if (transfer_encodings_++ > 0) codings_ += ',';
    codings_.append(value.data(), value.size());
  } else if (name == bhttp::field::expect && !expect_seen_) {
    expect_seen_ = true;
    expect_.assign(value.data(), value.size());
  }
  req_.fields.emplace_back(std::piecewise_construct, std::forward_as_tuple(name_string.data(), name_string.size()),
                           std::forward_as_tuple(value.data(), value.size()));
  ec = {};
}

void request_parser::on_header_impl(error_code& ec) { ec = {}; }

void request_parser::on_body_init_impl(const boost::optional<std::uint64_t>& content_length, error_code& ec) {
  // The parser holds the body to body_limit before this is called; a length known up front is
  // room made once.
  if (content_length) {
    if (*content_length > req_.body.max_size()) {
      ec = bhttp::error::buffer_overflow;
      return;
    }
    req_.body.reserve(static_cast<std::size_t>(*content_length));
  }
  ec = {};
}

std::size_t request_parser::on_body_impl(string_view body, error_code& ec) {
  req_.body.append(body.data(), body.size());
  ec = {};
  return body.size();
}

void request_parser::on_chunk_header_impl(std::uint64_t, string_view, error_code& ec) { ec = {}; }

std::size_t request_parser::on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) {
  req_.body.append(body.data(), body.size());
  ec = {};
  return body.size();
}

void request_parser::on_finish_impl(error_code& ec) { ec = {}; }

request_reader::result request_reader::parse(beast::flat_buffer& in, request_refusal& why) {
  if (!parser_) {
    if (!skip_blank_lines(in, why)) return result::refused;
    if (in.size() == 0) return result::need_more;
    parser_.emplace();
    parser_->body_limit(limits_.max_body_bytes);
    parser_->eager(false);  // until the header is done: see below
    header_checked_ = false;
    header_bytes_ = 0;
  }
  for (;;) {
    // Beast asserts (in builds without NDEBUG: a Debug server would abort) that when it looks
    // again at a last chunk ("0\r\n") it has seen, at least five bytes are buffered: a client
    // sending "0\r\n" and then one byte would trip it. A chunked body not yet complete always has
    // at least "0\r\n\r\n" still to come, so holding fewer bytes back never delays a request.
    if (parser_->is_header_done() && parser_->chunked() && !parser_->is_done() && in.size() < 5)
      return result::need_more;
    // Beast applies its header limit to each buffer it is given, the request line and the fields
    // apart, and consumes every complete field: fields trickling in one read at a time would pass
    // any limit. So Beast's limit is what is left of max_header_bytes after the bytes it consumed
    // so far, it stops where the header ends (not eager until then), and the header's bytes are
    // counted here, however they arrived.
    const bool in_header = !parser_->is_header_done();
    if (in_header) parser_->header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes - header_bytes_));
    beast::error_code ec;
    const std::size_t used = parser_->put(in.data(), ec);
    in.consume(used);
    if (in_header) {
      header_bytes_ += used;
      if (header_bytes_ > limits_.max_header_bytes) ec = bhttp::error::header_limit;
      if (parser_->is_header_done()) parser_->eager(true);
    }
    // The framing is decided from the header alone: judge it before anything else happens
    // (100 Continue, reading the body, answering).
    if (!header_checked_ && parser_->is_header_done()) {
      header_checked_ = true;
      if (!header_acceptable(why)) return result::refused;
    }
    if (ec && ec != bhttp::error::need_more) {
      parse_error(ec, why);
      return result::refused;
    }
    if (parser_->is_done()) return result::request;
    if (!ec && used > 0) {
      if (in.size() > 0) continue;  // more of the buffer to parse
      return result::need_more;
    }
    if (!pending_chunk_lines_acceptable(in, why)) return result::refused;
    return result::need_more;
  }
}

parsed_request request_reader::take() {
  parsed_request req = std::move(parser_->request());
  req.keep_alive = parser_->keep_alive();
  parser_.reset();
  blank_ = 0;
  return req;
}

// Empty lines before a request line are skipped (RFC 9112 section 2.2), up to
// leading_blank_limit bytes since the last request. False when the request is refused.
bool request_reader::skip_blank_lines(beast::flat_buffer& in, request_refusal& why) {
  const auto* data = static_cast<const char*>(in.data().data());
  const std::size_t size = in.size();
  std::size_t n = 0;
  while (n < size && (data[n] == '\r' || data[n] == '\n')) ++n;
  if (n == 0) return true;
  in.consume(n);
  blank_ += n;
  if (blank_ <= limits_.leading_blank_limit) return true;
  why = {400, "bad_request",
         fmt::format("more than {} bytes of empty lines before the request line", limits_.leading_blank_limit)};
  return false;
}

// Framing and Host (RFC 9112 sections 3.2, 6.1 and 6.3). Beast frames a request whose last
// transfer coding is not chunked as one without a body, and lets a Content-Length that follows
// such a Transfer-Encoding frame it: both would let a client smuggle a second request inside
// the body. So: any Transfer-Encoding with a Content-Length, or in HTTP/1.0, or whose final
// coding is not a single chunked, is 400; chunked after another coding (gzip, chunked) is 501,
// as we decode none. Every refusal closes the connection: the rest of the stream cannot be
// framed.
bool request_reader::header_acceptable(request_refusal& why) const {
  // The parser counted the fields as they went by, and kept the Transfer-Encoding values.
  const request_parser& p = *parser_;
  const unsigned version = p.request().version;
  const std::size_t hosts = p.hosts();
  if (hosts > 1 || (hosts == 0 && version >= 11)) {
    why = {400, "bad_request",
           hosts > 1 ? "a request may carry one Host header only" : "an HTTP/1.1 request needs a Host header"};
    return false;
  }
  if (p.transfer_encodings() == 0) return true;
  if (p.content_lengths() > 0) {
    why = {400, "bad_request", "a request may not carry both Transfer-Encoding and Content-Length"};
    return false;
  }
  if (version < 11) {
    why = {400, "bad_request", "Transfer-Encoding is not allowed in an HTTP/1.0 request"};
    return false;
  }
  std::size_t codings = 0;
  bool chunked_before_last = false, other = false, last_chunked = false;
  std::string_view list = p.transfer_coding_list();
  while (!list.empty()) {
    const auto comma = list.find(',');
    std::string_view coding = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    while (!coding.empty() && (coding.front() == ' ' || coding.front() == '\t')) coding.remove_prefix(1);
    while (!coding.empty() && (coding.back() == ' ' || coding.back() == '\t')) coding.remove_suffix(1);
    if (coding.empty()) continue;  // empty list elements are allowed and mean nothing
    ++codings;
    if (last_chunked) chunked_before_last = true;
    last_chunked = beast::iequals(coding, "chunked");
    if (!last_chunked) other = true;
  }
  if (codings == 0 || !last_chunked || chunked_before_last || !p.chunked()) {
    why = {400, "bad_request", "the final transfer coding of a request must be chunked, once"};
    return false;
  }
  if (other) {
    why = {501, "not_implemented", "no transfer coding other than chunked is supported"};
    return false;
  }
  return true;
}

// Beast buffers a chunk-size line, its extensions and the trailer section without a bound of
// its own: they stay in `in`, unconsumed, until they end. Hold the line to chunk_line_limit
// and the trailers to max_header_bytes.
bool request_reader::pending_chunk_lines_acceptable(const beast::flat_buffer& in, request_refusal& why) const {
  if (!parser_->is_header_done() || !parser_->chunked() || parser_->is_done()) return true;
  std::string_view pending(static_cast<const char*>(in.data().data()), in.size());
  if (pending.size() <= std::min(limits_.chunk_line_limit, limits_.max_header_bytes)) return true;
  if (pending.substr(0, 2) == "\r\n") pending.remove_prefix(2);  // the end of the last chunk's data
  const auto eol = pending.find("\r\n");
  if (eol == std::string_view::npos || eol > limits_.chunk_line_limit) {
    why = {400, "bad_request", fmt::format("a chunk-size line exceeds {} bytes", limits_.chunk_line_limit)};
    return false;
  }
  // A complete line left unconsumed is the last chunk's: the trailer section follows it.
  if (pending.size() - eol - 2 > limits_.max_header_bytes) {
    why = {400, "bad_request", fmt::format("request trailers exceed {} bytes", limits_.max_header_bytes)};
    return false;
  }
  return true;
}

void request_reader::parse_error(beast::error_code ec, request_refusal& why) const {
  if (ec == bhttp::error::header_limit)
    why = {431, "header_fields_too_large", fmt::format("request headers exceed {} bytes", limits_.max_header_bytes)};
  else if (ec == bhttp::error::body_limit)
    why = {413, "payload_too_large", fmt::format("request body exceeds {} bytes", limits_.max_body_bytes)};
  else
    why = {400, "bad_request", "malformed HTTP request"};
}

}  // namespace rc::http_detail
