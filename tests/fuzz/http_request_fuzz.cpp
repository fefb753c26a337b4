// Fuzz target: bytes from a client through the HTTP server's request reader
// (components/src/http_request_reader.hpp), as the connection feeds it.
//
// Input: four bytes of limits, then the stream. The stream is parsed three ways: whole, a byte at
// a time (a few KiB at most, the rest in 7-byte pieces) and in pieces of pseudo-random sizes
// seeded from the input. However the reads fall, the reader must frame the stream the same way:
// the same requests, in the same order (a request on one side and not the other is how request
// smuggling starts). Once the ways disagree, each must have stopped reading requests: refused or
// waiting for more. Where they stop may differ: Beast sees some malformed lines (a bare LF) only
// when they arrive whole, and the chunk-size line and trailer bounds judge what the reader holds
// while waiting for the rest of a line, so a long line that arrives whole in one read passes where
// the same line trickling in is refused. Memory stays bounded either way.
#include <boost/beast/core/flat_buffer.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_harness.hpp"
#include "http_request_reader.hpp"

namespace rc::fuzz {

namespace {

using http_detail::request_limits;
using http_detail::request_reader;

// What a connection would see: one line per request (method, target, version, fields, body) or
// refusal, and whether a request was left half-read at the end.
std::string transcript(std::string_view stream, const request_limits& limits, const std::vector<std::size_t>& pieces) {
  std::string out;
  request_reader reader(limits);
  boost::beast::flat_buffer in;
  std::size_t at = 0, piece = 0;
  while (at < stream.size()) {
    const std::size_t n =
        std::min(stream.size() - at, pieces.empty() ? stream.size() : pieces[piece++ % pieces.size()]);
    auto buf = in.prepare(n);
    std::copy_n(stream.data() + at, n, static_cast<char*>(buf.data()));
    in.commit(n);
    at += n;
    while (in.size() > 0) {
      http_detail::request_refusal why;
      const auto got = reader.parse(in, why);
      if (got == request_reader::result::refused) {
        if (why.status < 400 || why.status > 599 || why.code.empty() || why.message.empty())
          throw finding("a refusal without a 4xx/5xx status, a code and a message");
        out += "refused " + std::to_string(why.status) + " " + std::string(why.code) + " " + why.message + "\n";
        return out;
      }
      if (got == request_reader::result::need_more) break;
      const auto req = reader.take();
      if (reader.started()) throw finding("take() left a request started");
      out += "request " + req.method_text + " " + req.target + " " + std::to_string(req.version) +
             (req.keep_alive ? " keep-alive" : " close");
      for (const auto& [name, value] : req.fields) out += " [" + name + ": " + value + "]";
      if (req.body.size() > limits.max_body_bytes) throw finding("a body over max_body_bytes was accepted");
      out += " body " + std::to_string(req.body.size()) + ":" + req.body + "\n";
    }
  }
  out += reader.started() ? "unfinished\n" : "idle\n";
  return out;
}

// Whether `line` is a refusal by a bound that depends on how the bytes arrive (see above).
bool split_dependent(std::string_view line) {
  return line.starts_with("refused 400 bad_request a chunk-size line exceeds") ||
         line.starts_with("refused 400 bad_request request trailers exceed");
}

void same_framing(const std::string& split, const std::string& whole, std::string_view how) {
  std::size_t at = 0;  // the first line where they differ
  while (at < split.size() && at < whole.size()) {
    const auto a = split.find('\n', at), b = whole.find('\n', at);
    if (a != b || split.compare(at, a - at, whole, at, b - at) != 0) break;
    at = a + 1;
  }
  if (split.size() == whole.size() && at >= split.size()) return;  // identical
  const std::string_view x = std::string_view(split).substr(at), y = std::string_view(whole).substr(at);
  const bool x_request = x.starts_with("request "), y_request = y.starts_with("request ");
  if (!x_request && !y_request) return;  // both stopped reading requests there
  if ((x_request && split_dependent(y)) || (y_request && split_dependent(x))) return;
  throw finding(std::string("framed differently fed ") + std::string(how) + ":\n" + split + "than whole:\n" + whole);
}

}  // namespace

void http_request(std::string_view input) {
  if (input.size() < 4) return;
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(input[i]); };
  request_limits limits;
  limits.max_header_bytes = 256 + std::size_t{byte(0)} * 32;  // [256, 8416]: the server's minimum is 256
  limits.max_body_bytes = std::size_t{byte(1)} * 64;
  limits.chunk_line_limit = 16 + std::size_t{byte(2)} * 16;
  limits.leading_blank_limit = std::size_t{byte(3)} * 4;
  const std::string_view stream = input.substr(4);

  const std::string whole = transcript(stream, limits, {});

  std::vector<std::size_t> single{1};
  if (stream.size() > 4096) single = {7};  // byte by byte is quadratic in the header size
  const std::string bytewise = transcript(stream, limits, single);
  same_framing(bytewise, whole, "in small pieces");

  std::vector<std::size_t> random;
  std::uint64_t state = 0x9e3779b97f4a7c15ULL ^ stream.size();
  for (const char c : stream) state = (state ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  for (int i = 0; i < 16; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    random.push_back(1 + (state >> 33) % 512);
  }
  const std::string pieces = transcript(stream, limits, random);
  same_framing(pieces, whole, "in random pieces");
}

}  // namespace rc::fuzz
