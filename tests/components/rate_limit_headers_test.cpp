#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "rc/http_rate_limit_headers.hpp"

namespace rate_limit_headers_test {

using namespace std::chrono_literals;
using rc::rate_limit_headers;
using rc::rate_limit_outcome;

namespace {

// Tue, 14 Nov 2023 22:13:20.123 GMT
constexpr std::int64_t wall_now_ms = 1'700'000'000'123;

rc::rate_limit_info info(std::uint64_t used, rc::duration reset_in = 12s) {
  return {.limit = 7,
          .used = used,
          .remaining = rc::rate_limit_remaining(7, used),
          .reset_in = reset_in,
          .window = 30s,
          .key = "127.0.0.1",
          .policy_name = {}};
}

rc::header_list headers(rate_limit_headers mode, const rc::rate_limit_info& counted,
                        rate_limit_outcome outcome = rate_limit_outcome::passed) {
  return rc::rate_limit_header_list(mode, counted, wall_now_ms, outcome);
}

}  // namespace

TEST_CASE("draft-6 writes the policy, the limit, what remains and the relative reset") {
  const rc::header_list expected{{"RateLimit-Policy", "7;w=30"},
                                 {"RateLimit-Limit", "7"},
                                 {"RateLimit-Remaining", "4"},
                                 {"RateLimit-Reset", "12"}};
  CHECK(headers(rate_limit_headers::draft_6, info(3)) == expected);
}

TEST_CASE("draft-7 writes the policy and one comma-separated RateLimit header") {
  const rc::header_list expected{{"RateLimit-Policy", "7;w=30"}, {"RateLimit", "limit=7, remaining=0, reset=12"}};
  CHECK(headers(rate_limit_headers::draft_7, info(9)) == expected);
}

TEST_CASE("draft-8 writes a named quota with the partition key of the client") {
  const rc::header_list expected{{"RateLimit", "\"7-in-30sec\"; r=6; t=12"},
                                 {"RateLimit-Policy", "\"7-in-30sec\"; q=7; w=30; pk=:MTJjYTE3YjQ5YWYy:"}};
  CHECK(headers(rate_limit_headers::draft_8, info(1)) == expected);

  auto named = info(1);
  named.policy_name = "api";
  named.key = "client-a";
  const rc::header_list custom{{"RateLimit", "\"api\"; r=6; t=12"},
                               {"RateLimit-Policy", "\"api\"; q=7; w=30; pk=:ZTBiMTA3ZjlmOTZm:"}};
  CHECK(headers(rate_limit_headers::draft_8, named) == custom);
}

TEST_CASE("legacy headers give the reset as absolute epoch seconds with the Date they count from") {
  // The window ends at ...011.623 s: rounded up to ...012.
  const rc::header_list expected{{"X-RateLimit-Limit", "7"},
                                 {"X-RateLimit-Remaining", "5"},
                                 {"Date", "Tue, 14 Nov 2023 22:13:20 GMT"},
                                 {"X-RateLimit-Reset", "1700000012"}};
  CHECK(headers(rate_limit_headers::legacy, info(2, 11500ms)) == expected);

  // A window ending on a whole second is not rounded further.
  const auto whole = rc::rate_limit_header_list(rate_limit_headers::legacy, info(2, 10s), 1'700'000'000'000);
  CHECK(whole.back() == std::pair<std::string, std::string>{"X-RateLimit-Reset", "1700000010"});
}

TEST_CASE("draft-6 plus legacy writes both families, legacy first") {
  const auto both = headers(rate_limit_headers::draft_6 | rate_limit_headers::legacy, info(3));
  REQUIRE(both.size() == 8);
  CHECK(both[0].first == "X-RateLimit-Limit");
  CHECK(both[3].first == "X-RateLimit-Reset");
  CHECK(both[4] == std::pair<std::string, std::string>{"RateLimit-Policy", "7;w=30"});
  CHECK(both[7] == std::pair<std::string, std::string>{"RateLimit-Reset", "12"});
}

TEST_CASE("Retry-After is written only on a rejection and only when some header mode is on") {
  const auto rejected = headers(rate_limit_headers::draft_7, info(8), rate_limit_outcome::rejected);
  CHECK(rejected.back() == std::pair<std::string, std::string>{"Retry-After", "12"});
  CHECK(headers(rate_limit_headers::draft_7, info(7)).size() == 2);  // passed: none
  CHECK(headers(rate_limit_headers::none, info(8), rate_limit_outcome::rejected).empty());

  const auto legacy_only = headers(rate_limit_headers::legacy, info(8), rate_limit_outcome::rejected);
  CHECK(legacy_only.back().first == "Retry-After");

  const auto overridden = rc::rate_limit_header_list(rate_limit_headers::draft_6, info(8), wall_now_ms,
                                                     rate_limit_outcome::rejected, "120");
  CHECK(overridden.back() == std::pair<std::string, std::string>{"Retry-After", "120"});
}

TEST_CASE("a mode with two drafts writes no standard headers but still turns Retry-After on") {
  const auto mode = rate_limit_headers::draft_6 | rate_limit_headers::draft_7;
  CHECK_FALSE(rc::is_valid_header_mode(mode));
  const rc::header_list expected{{"Retry-After", "12"}};
  CHECK(headers(mode, info(8), rate_limit_outcome::rejected) == expected);
}

TEST_CASE("header modes combine one draft with legacy") {
  using enum rate_limit_headers;
  CHECK(rc::is_valid_header_mode(none));
  CHECK(rc::is_valid_header_mode(draft_8 | legacy));
  CHECK_FALSE(rc::is_valid_header_mode(draft_7 | draft_8));
  CHECK_FALSE(rc::is_valid_header_mode(static_cast<rate_limit_headers>(0x30)));
  CHECK(rc::includes(draft_6 | legacy, legacy));
  CHECK_FALSE(rc::includes(draft_6, legacy));
  CHECK_FALSE(rc::includes(draft_6, none));
}

TEST_CASE("resets and windows round up to whole seconds and remaining never goes below zero") {
  CHECK(rc::rate_limit_reset_seconds(1ns) == 1);
  CHECK(rc::rate_limit_reset_seconds(12001ms) == 13);
  CHECK(rc::rate_limit_reset_seconds(12s) == 12);
  CHECK(rc::rate_limit_reset_seconds(0s) == 0);
  CHECK(rc::rate_limit_reset_seconds(-3s) == 0);
  CHECK(rc::rate_limit_window_seconds(1500ms) == 2);
  CHECK(rc::rate_limit_remaining(7, 9) == 0);
  CHECK(rc::rate_limit_remaining(7, 7) == 0);
  CHECK(rc::rate_limit_remaining(7, 1) == 6);

  auto late = info(3, 0s);  // e.g. a zero window: reset 0 is still written
  late.window = 1500ms;
  const rc::header_list expected{
      {"RateLimit-Policy", "7;w=2"}, {"RateLimit-Limit", "7"}, {"RateLimit-Remaining", "4"}, {"RateLimit-Reset", "0"}};
  CHECK(headers(rate_limit_headers::draft_6, late) == expected);
}

TEST_CASE("the default draft-8 policy name says the limit and the window in words") {
  using rc::rate_limit_policy_name;
  CHECK(rate_limit_policy_name(7, 500ms) == "7-in-0.5sec");
  CHECK(rate_limit_policy_name(7, 1ms) == "7-in-0.001sec");
  CHECK(rate_limit_policy_name(7, 30s) == "7-in-30sec");
  CHECK(rate_limit_policy_name(7, 59999ms) == "7-in-59.999sec");
  CHECK(rate_limit_policy_name(7, 60s) == "7-in-1min");
  CHECK(rate_limit_policy_name(7, 90s) == "7-in-1.5min");
  CHECK(rate_limit_policy_name(7, 100000ms) == "7-in-1.6666666666666667min");
  CHECK(rate_limit_policy_name(7, 1h) == "7-in-1hr");
  CHECK(rate_limit_policy_name(7, 90min) == "7-in-1.5hrs");
  CHECK(rate_limit_policy_name(7, 2h) == "7-in-2hrs");
  CHECK(rate_limit_policy_name(7, 24h) == "7-in-1day");
  CHECK(rate_limit_policy_name(7, 36h) == "7-in-1.5days");
  CHECK(rate_limit_policy_name(5, 48h) == "5-in-2days");
}

TEST_CASE("numbers print as JavaScript prints them") {
  using rc::format_js_number;
  CHECK(format_js_number(0.1 + 0.2) == "0.30000000000000004");
  CHECK(format_js_number(123456789012.0) == "123456789012");
  CHECK(format_js_number(1e20) == "100000000000000000000");
  CHECK(format_js_number(1e21) == "1e+21");
  CHECK(format_js_number(1.5e21) == "1.5e+21");
  CHECK(format_js_number(0.000001) == "0.000001");
  CHECK(format_js_number(1e-7) == "1e-7");
  CHECK(format_js_number(-2.5) == "-2.5");
  CHECK(format_js_number(-0.0) == "0");
}

TEST_CASE("HTTP dates print as JavaScript's toUTCString") {
  CHECK(rc::http_date(0) == "Thu, 01 Jan 1970 00:00:00 GMT");
  CHECK(rc::http_date(-1) == "Wed, 31 Dec 1969 23:59:59 GMT");
  CHECK(rc::http_date(1'709'168'523'999) == "Thu, 29 Feb 2024 01:02:03 GMT");
  CHECK(rc::http_date(-62'198'755'200'000) == "Fri, 01 Jan -0001 00:00:00 GMT");
}

TEST_CASE("SHA-256 matches the published test vectors") {
  using rc::sha256_hex;
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1'000'000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("SHA-256 pads correctly around block boundaries") {
  using rc::sha256_hex;
  CHECK(sha256_hex(std::string(55, 'x')) == "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072");
  CHECK(sha256_hex(std::string(56, 'x')) == "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e");
  CHECK(sha256_hex(std::string(63, 'x')) == "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2");
  CHECK(sha256_hex(std::string(64, 'x')) == "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c");
  CHECK(sha256_hex(std::string(119, 'x')) == "000b48d4edf0fa7bee3c6236ecd2785baa5db4eeb8bb54341b029e0d9fa5fb0c");
  CHECK(sha256_hex(std::string(120, 'x')) == "13f05a0b594787f5ecd315edc96141bd3243203d1b7d4f0836f37308b276ba98");
}

TEST_CASE("base64 matches the RFC 4648 test vectors") {
  using rc::base64_encode;
  CHECK(base64_encode("").empty());
  CHECK(base64_encode("f") == "Zg==");
  CHECK(base64_encode("fo") == "Zm8=");
  CHECK(base64_encode("foo") == "Zm9v");
  CHECK(base64_encode("foob") == "Zm9vYg==");
  CHECK(base64_encode("fooba") == "Zm9vYmE=");
  CHECK(base64_encode("foobar") == "Zm9vYmFy");
}

TEST_CASE("the partition key is 16 base64 characters of the key's hash") {
  CHECK(rc::rate_limit_partition_key("127.0.0.1") == "MTJjYTE3YjQ5YWYy");
  CHECK(rc::rate_limit_partition_key("").size() == 16);
}

}  // namespace rate_limit_headers_test
