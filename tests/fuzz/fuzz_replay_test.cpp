// The fuzz targets' inputs, replayed in the normal suite (and so under ASan/UBSan and TSan in the
// sanitizer jobs): every seed of the committed corpus, and every input a fuzzer crashed on
// (regressions/<target>/, named after what it found). A crash fixed once stays fixed.
#include <algorithm>
#include <boost/beast/core/flat_buffer.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <rc/http.hpp>
#include <string>
#include <vector>

#include "fuzz_harness.hpp"
#include "http_request_reader.hpp"

namespace {

namespace fs = std::filesystem;

std::vector<fs::path> inputs_of(const std::string& target) {
  std::vector<fs::path> files;
  for (const char* kind : {"corpus", "regressions"}) {
    const fs::path dir = fs::path(RC_SOURCE_DIR) / "tests" / "fuzz" / kind / target;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string contents(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <class Target>
void replay(const std::string& target, Target run, std::size_t at_least) {
  const auto files = inputs_of(target);
  REQUIRE(files.size() >= at_least);
  for (const auto& file : files) {
    INFO(file.string());
    const std::string input = contents(file);
    REQUIRE_NOTHROW(run(input));
  }
}

// Appends `bytes` to what `in` holds, as a read would, and lets the reader parse it all.
rc::http_detail::request_reader::result feed(rc::http_detail::request_reader& reader, boost::beast::flat_buffer& in,
                                             std::string_view bytes, rc::http_detail::request_refusal& why) {
  auto buf = in.prepare(bytes.size());
  std::copy(bytes.begin(), bytes.end(), static_cast<char*>(buf.data()));
  in.commit(bytes.size());
  return reader.parse(in, why);
}

}  // namespace

TEST_CASE("http request reader: every corpus and regression input parses the same however it is split", "[fuzz]") {
  replay("http_request", rc::fuzz::http_request, 10);
}

TEST_CASE("rc-sim scenario reader: every corpus and regression input is read, or refused with a message", "[fuzz]") {
  replay("scenario", rc::fuzz::scenario, 10);
}

TEST_CASE("http options: every corpus and regression input is accepted sensibly, or refused as RC5003", "[fuzz]") {
  replay("http_options", rc::fuzz::http_options, 10);
}

TEST_CASE("http routes: for every corpus and regression input the index names every matching route", "[fuzz]") {
  replay("http_routes", rc::fuzz::http_routes, 5);
}

// Found by fuzz_http_request: Beast asserted, aborting a Debug server, when the last chunk of a
// body came first and exactly one more byte followed it in a later read.
TEST_CASE("http request reader: a last chunk then one more byte waits for the rest, then completes", "[fuzz]") {
  rc::http_detail::request_reader reader(rc::http_detail::request_limits{});
  boost::beast::flat_buffer in;
  rc::http_detail::request_refusal why;
  using result = rc::http_detail::request_reader::result;
  REQUIRE(feed(reader, in, "POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n", why) ==
          result::need_more);
  REQUIRE(feed(reader, in, "X", why) == result::need_more);
  REQUIRE(feed(reader, in, "-Sum: 1\r\n", why) == result::need_more);
  REQUIRE(feed(reader, in, "\r\n", why) == result::request);
  const auto req = reader.take();
  CHECK(req.target == "/up");
  CHECK(req.body.empty());
  // A trailer field joins the fields, after the header's.
  REQUIRE(rc::find_http_header(req.fields, "x-sum") != nullptr);
  CHECK(*rc::find_http_header(req.fields, "x-sum") == "1");
  CHECK(in.size() == 0);
}

// Found by fuzz_http_request: Beast consumes each complete header field and applies its header
// limit to one buffer at a time, so fields arriving one read each passed max_header_bytes.
TEST_CASE("http request reader: header fields trickling in one read each still meet max_header_bytes", "[fuzz]") {
  rc::http_detail::request_limits limits;
  limits.max_header_bytes = 256;
  rc::http_detail::request_reader reader(limits);
  boost::beast::flat_buffer in;
  rc::http_detail::request_refusal why;
  using result = rc::http_detail::request_reader::result;
  REQUIRE(feed(reader, in, "GET / HTTP/1.1\r\nHost: a\r\n", why) == result::need_more);
  const std::string field = "X-Pad: " + std::string(40, 'p') + "\r\n";  // 49 bytes
  int sent = 0;
  auto got = result::need_more;
  while (got == result::need_more && sent < 20) {
    got = feed(reader, in, field, why);
    ++sent;
  }
  REQUIRE(got == result::refused);
  CHECK(why.status == 431);
  CHECK(sent <= 5);  // 25 bytes, then 49 a field: the sixth would pass 256
}

// The reader hands the server the fields as they came (order and spelling), and judges
// keep-alive from every Connection field, not only the first.
TEST_CASE("http request reader: fields keep order and spelling, and any Connection: close ends keep-alive", "[fuzz]") {
  rc::http_detail::request_reader reader(rc::http_detail::request_limits{});
  boost::beast::flat_buffer in;
  const auto read_one = [&](std::string_view bytes) {
    rc::http_detail::request_refusal why;
    REQUIRE(feed(reader, in, bytes, why) == rc::http_detail::request_reader::result::request);
    return reader.take();
  };
  const auto req =
      read_one("GET /a?b=1 HTTP/1.1\r\nhost: x\r\nX-Two: 2\r\nx-two: two\r\nConnection: keep-alive\r\n\r\n");
  CHECK(req.method == boost::beast::http::verb::get);
  CHECK(req.method_text == "GET");
  CHECK(req.target == "/a?b=1");
  CHECK(req.version == 11);
  CHECK(req.keep_alive);
  using field = std::pair<std::string, std::string>;
  CHECK(req.fields ==
        std::vector<field>{{"host", "x"}, {"X-Two", "2"}, {"x-two", "two"}, {"Connection", "keep-alive"}});
  REQUIRE(rc::find_http_header(req.fields, "X-TWO") != nullptr);
  CHECK(*rc::find_http_header(req.fields, "X-TWO") == "2");
  CHECK(rc::find_http_header(req.fields, "Content-Type") == nullptr);

  CHECK_FALSE(read_one("GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n").keep_alive);
  CHECK_FALSE(read_one("GET / HTTP/1.0\r\n\r\n").keep_alive);
  const auto posted = read_one("POST / HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabc");
  CHECK(posted.keep_alive);
  CHECK(posted.version == 10);
  CHECK(posted.body == "abc");
  CHECK(in.size() == 0);
}
