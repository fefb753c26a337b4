// json() and jsonl(): sources, destinations and transformers; parse failures in each
// on_parse_error mode; streaming in bounded memory; missing files. Virtual time throughout.
#include <catch2/catch.hpp>
#include <filesystem>
#include <rc/rc.hpp>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"
#include "support/temp_dir.hpp"

namespace json_test {

using rc::test::event_recorder;
using rc::test::temp_dir;

namespace shop {
struct order {
  std::string id;
  int qty = 0;
  bool operator==(const order&) const = default;
};
void to_json(nlohmann::json& j, const order& o) { j = {{"id", o.id}, {"qty", o.qty}}; }
void from_json(const nlohmann::json& j, order& o) {
  j.at("id").get_to(o.id);
  j.at("qty").get_to(o.qty);
}
}  // namespace shop

using shop::order;

namespace {

std::vector<std::string> ids(const std::vector<order>& v) {
  std::vector<std::string> out;
  for (const auto& o : v) out.push_back(o.id);
  return out;
}

}  // namespace

// ---- json ---------------------------------------------------------------------------------------

TEST_CASE("json: a file is one exchange of a user type, the destination writes it back atomically") {
  temp_dir dir;
  const auto in = dir.write("in.json", R"({"id": "a1", "qty": 3})");
  const auto out = dir.file("out.json");
  rc::context ctx(rc::virtual_time);
  rc::spy<order> seen;
  ctx.add(rc::craft()
              .id("j")
              .from(rc::json<order>({.path = in}))
              .tap(seen)
              .transform([](order o) {
                o.qty *= 2;
                return o;
              })
              .to(rc::json({.path = out, .indent = 2})));
  ctx.start();
  ctx.drain();
  REQUIRE(seen.count() == 1);
  CHECK(seen.bodies()[0] == order{"a1", 3});
  CHECK(nlohmann::json::parse(temp_dir::read(out)) == nlohmann::json{{"id", "a1"}, {"qty", 6}});
  // Written through a temporary file then renamed: nothing else is left in the folder.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"in.json", "out.json"});
}

TEST_CASE("json: the transformer parses a string body into T and serializes it back") {
  rc::context ctx(rc::virtual_time);
  rc::spy<order> parsed;
  rc::spy<std::string> text;
  ctx.add(rc::craft()
              .id("t")
              .from(rc::simple(std::string(R"({"qty": 5, "id": "z"})")))
              .transform(rc::json<order>())
              .tap(parsed)
              .transform(rc::json<order>())
              .to(text));
  ctx.start();
  ctx.drain();
  REQUIRE(parsed.count() == 1);
  CHECK(parsed.bodies()[0] == order{"z", 5});
  CHECK(text.bodies() == std::vector<std::string>{R"({"id":"z","qty":5})"});
}

TEST_CASE("json: the transformer fails a bad string with RC5016") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:failed");
  ctx.add(rc::craft().id("t").from(rc::simple(std::string("{oops"))).transform(rc::json<>()).to(rc::noop()));
  ctx.start();
  ctx.drain();
  REQUIRE(events.count("route:exchange:failed") == 1);
  CHECK(events.all()[0].details["error"]["code"] == "RC5016");
}

TEST_CASE("json: malformed JSON fails with RC5016 naming the file, the error handler sees it") {
  temp_dir dir;
  const auto in = dir.write("bad.json", R"({"id": "a1", "qty": )");
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  std::vector<std::string> handled;
  rc::spy<order> out;
  ctx.add(rc::craft()
              .id("j")
              .error([&](const rc::error& e, rc::exchange&) -> rc::recovery {
                handled.push_back(e.code_string() + " " + e.message());
                return rc::recovery::rethrow();
              })
              .from(rc::json<order>({.path = in}))
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.count() == 0);
  REQUIRE(handled.size() == 1);
  CHECK(handled[0].find("RC5016") == 0);
  CHECK(handled[0].find(in) != std::string::npos);
  REQUIRE(events.count("route:parse:failed") == 1);
  const auto pf = events.named("route:parse:failed")[0].details;
  CHECK(pf["mode"] == "fail");
  CHECK(pf["adapter"] == "json");
  CHECK(pf["error"]["code"] == "RC5016");
  CHECK(events.count("route:exchange:failed") == 1);
}

TEST_CASE("json: a missing file is RC5014 from the source") {
  temp_dir dir;
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  ctx.add(rc::craft().id("j").from(rc::json({.path = dir.file("nope.json")})).to(rc::noop()));
  ctx.start();
  ctx.drain();
  REQUIRE(events.count("route:source:failed") == 1);
  const auto e = events.named("route:source:failed")[0].details["error"];
  CHECK(e["code"] == "RC5014");
  CHECK(e["message"].get<std::string>().find("No such file") != std::string::npos);
  CHECK(events.count("context:error") == 1);
  CHECK(events.count("route:exchange:started") == 0);
}

TEST_CASE("json: options are checked (RC5003)") {
  CHECK_THROWS_MATCHES(rc::json({.path = ""}), rc::error, rc::test::rc_error(rc::errc::misconfigured, "path"));
  CHECK_THROWS_MATCHES(rc::json({.path = "x", .indent = -2}), rc::error,
                       rc::test::rc_error(rc::errc::misconfigured, "indent"));
}

TEST_CASE("json: a body without to_json cannot be written (RC5002), and a write failure is RC5014") {
  struct opaque {};
  temp_dir dir;
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:failed");
  ctx.add(rc::craft().id("a").from(rc::simple(opaque{})).to(rc::json({.path = dir.file("o.json")})));
  ctx.add(rc::craft().id("b").from(rc::simple(1)).to(rc::json({.path = dir.file("no/such/dir/o.json")})));
  ctx.start();
  ctx.drain();
  std::vector<std::string> codes;
  for (const auto& e : events.all()) codes.push_back(e.details["error"]["code"]);
  std::sort(codes.begin(), codes.end());
  CHECK(codes == std::vector<std::string>{"RC5002", "RC5014"});
}

// ---- jsonl --------------------------------------------------------------------------------------

TEST_CASE("jsonl: one exchange per line with line headers, the destination appends lines") {
  temp_dir dir;
  const auto in =
      dir.write("in.jsonl", "{\"id\":\"a\",\"qty\":1}\r\n\n{\"id\":\"b\",\"qty\":2}\n   \n{\"id\":\"c\",\"qty\":3}");
  const auto out = dir.write("out.jsonl", "{\"id\":\"old\",\"qty\":0}\n");
  rc::context ctx(rc::virtual_time);
  rc::spy<order> seen;
  ctx.add(rc::craft().id("l").from(rc::jsonl<order>({.path = in})).tap(seen).to(rc::jsonl({.path = out})));
  ctx.start();
  ctx.drain();
  CHECK(ids(seen.bodies()) == std::vector<std::string>{"a", "b", "c"});
  std::vector<std::int64_t> lines;
  for (const auto& r : seen.received()) lines.push_back(r.headers.find("routecraft.jsonl.line")->get<std::int64_t>());
  CHECK(lines == std::vector<std::int64_t>{1, 3, 5});
  CHECK(*seen.received()[0].headers.find("routecraft.jsonl.path") == in);
  CHECK(temp_dir::read(out) ==
        "{\"id\":\"old\",\"qty\":0}\n{\"id\":\"a\",\"qty\":1}\n{\"id\":\"b\",\"qty\":2}\n{\"id\":\"c\",\"qty\":3}\n");
}

TEST_CASE("jsonl: the transformer turns a string into records and back") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::vector<order>> parsed;
  rc::spy<std::string> text;
  ctx.add(rc::craft()
              .id("t")
              .from(rc::simple(std::string("{\"id\":\"a\",\"qty\":1}\n\n{\"id\":\"b\",\"qty\":2}\n")))
              .transform(rc::jsonl<order>())
              .tap(parsed)
              .transform(rc::jsonl<order>())
              .to(text));
  ctx.start();
  ctx.drain();
  REQUIRE(parsed.count() == 1);
  CHECK(ids(parsed.bodies()[0]) == std::vector<std::string>{"a", "b"});
  CHECK(text.bodies() == std::vector<std::string>{"{\"id\":\"a\",\"qty\":1}\n{\"id\":\"b\",\"qty\":2}\n"});
}

namespace {

// Lines 1, 2 good; 3 not JSON; 4 JSON but not an order; 5 good.
std::string mixed_jsonl(const temp_dir& dir) {
  return dir.write("mixed.jsonl",
                   "{\"id\":\"a\",\"qty\":1}\n{\"id\":\"b\",\"qty\":2}\n{\"id\":\"c\",\n{\"id\":4}\n"
                   "{\"id\":\"e\",\"qty\":5}\n");
}

}  // namespace

TEST_CASE("jsonl, on_parse_error fail (default): each bad line fails with RC5016 and its line, the rest go on") {
  temp_dir dir;
  const auto in = mixed_jsonl(dir);
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<order> out;
  ctx.add(rc::craft().id("l").from(rc::jsonl<order>({.path = in})).to(out));
  ctx.start();
  ctx.drain();
  CHECK(ids(out.bodies()) == std::vector<std::string>{"a", "b", "e"});
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 2);
  CHECK(failed[0].details["error"]["code"] == "RC5016");
  CHECK(failed[0].details["error"]["message"].get<std::string>().find("line 3") != std::string::npos);
  CHECK(failed[1].details["error"]["message"].get<std::string>().find("line 4") != std::string::npos);
  // The failed exchange still holds the raw line, so the event shows what did not parse.
  CHECK(failed[0].details["exchange"]["body"] == nlohmann::json{{"text", "{\"id\":\"c\","}, {"line", 3}});
  CHECK(events.count("route:parse:failed") == 2);
  CHECK(events.count("context:error") == 2);
  // The parse step is a step of the chain: its failure is a step error naming it.
  const auto step_errors = events.named("route:step:error");
  REQUIRE(step_errors.size() == 2);
  CHECK(step_errors[0].details["operation"] == "parse");
}

TEST_CASE("jsonl, on_parse_error drop: bad lines are dropped as \"parse-failed\", nothing fails") {
  temp_dir dir;
  const auto in = mixed_jsonl(dir);
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<order> out;
  ctx.add(rc::craft().id("l").on_parse_error(rc::parse_error::drop).from(rc::jsonl<order>({.path = in})).to(out));
  ctx.start();
  ctx.drain();
  CHECK(ids(out.bodies()) == std::vector<std::string>{"a", "b", "e"});
  const auto dropped = events.named("route:exchange:dropped");
  REQUIRE(dropped.size() == 2);
  CHECK(dropped[0].details["reason"] == "parse-failed");
  CHECK(dropped[1].details["reason"] == "parse-failed");
  CHECK(events.count("route:exchange:failed") == 0);
  CHECK(events.count("context:error") == 0);
  // Not silent: each drop says why.
  const auto pf = events.named("route:parse:failed");
  REQUIRE(pf.size() == 2);
  CHECK(pf[0].details["mode"] == "drop");
  CHECK(pf[0].details["error"]["message"].get<std::string>().find("line 3") != std::string::npos);
}

TEST_CASE("jsonl, on_parse_error abort: the bad line fails, then the source stops (no later lines)") {
  temp_dir dir;
  const auto in = mixed_jsonl(dir);
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<order> out;
  std::vector<std::string> handled;
  ctx.add(rc::craft()
              .id("l")
              .on_parse_error(rc::parse_error::abort)
              .error([&](const rc::error& e, rc::exchange&) -> rc::recovery {
                handled.push_back(e.code_string());
                return rc::recovery::rethrow();
              })
              .from(rc::jsonl<order>({.path = in}))
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(ids(out.bodies()) == std::vector<std::string>{"a", "b"});
  CHECK(handled == std::vector<std::string>{"RC5016"});
  CHECK(events.count("route:exchange:started") == 3);
  REQUIRE(events.count("route:exchange:failed") == 1);
  CHECK(events.named("route:parse:failed")[0].details["mode"] == "abort");
  CHECK(events.count("route:stopped") == 1);
}

TEST_CASE("jsonl: a line over max_line_bytes is a parse failure, the reader skips it and goes on") {
  temp_dir dir;
  const std::string big = "{\"id\":\"" + std::string(300, 'x') + "\",\"qty\":1}";
  const auto in = dir.write("big.jsonl", "{\"id\":\"a\",\"qty\":1}\n" + big + "\n{\"id\":\"c\",\"qty\":3}\n");
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:dropped");
  rc::spy<order> out;
  ctx.add(rc::craft()
              .id("l")
              .on_parse_error(rc::parse_error::drop)
              .from(rc::jsonl<order>({.path = in, .chunk_bytes = 16, .max_line_bytes = 100}))
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(ids(out.bodies()) == std::vector<std::string>{"a", "c"});
  CHECK(events.count("route:exchange:dropped") == 1);
}

TEST_CASE("jsonl: 100,000 lines stream through in bounded memory, one run at a time") {
  temp_dir dir;
  const auto in = dir.file("many.jsonl");
  {
    std::ofstream f(in);
    for (int i = 0; i < 100000; ++i) f << "{\"id\":\"" << i << "\",\"qty\":" << i << "}\n";
  }
  rc::context ctx(rc::virtual_time);
  std::size_t n = 0;
  std::int64_t sum = 0;
  auto& rt = ctx.add(rc::craft().id("l").from(rc::jsonl<order>({.path = in, .chunk_bytes = 4096})).to([&](order& o) {
    ++n;
    sum += o.qty;
  }));
  ctx.start();
  ctx.drain();
  CHECK(n == 100000);
  CHECK(sum == std::int64_t{99999} * 100000 / 2);
  // The reader held one 4 KiB chunk plus one short line, never the file (about 3 MB).
  const auto* src = dynamic_cast<const rc::jsonl_file<order>*>(rt.definition().source.get());
  REQUIRE(src != nullptr);
  CHECK(src->peak_buffered() > 4096);
  CHECK(src->peak_buffered() <= 4096 + 64);
}

TEST_CASE("jsonl: a missing file is RC5014, options are checked") {
  temp_dir dir;
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:source:failed");
  ctx.add(rc::craft().id("l").from(rc::jsonl({.path = dir.file("nope.jsonl")})).to(rc::noop()));
  ctx.start();
  ctx.drain();
  REQUIRE(events.count("route:source:failed") == 1);
  CHECK(events.all()[0].details["error"]["code"] == "RC5014");
  CHECK_THROWS_MATCHES(rc::jsonl({.path = "x", .chunk_bytes = 0}), rc::error,
                       rc::test::rc_error(rc::errc::misconfigured, "chunk_bytes"));
}

TEST_CASE("jsonl: parsing comes before the route's gates, so a bad line takes no throttle token") {
  // One token, reject mode, both lines at the same instant: were the bad line admitted first, the
  // good one would be refused with RC5013.
  temp_dir dir;
  const auto in = dir.write("two.jsonl", "not json\n{\"id\":\"ok\",\"qty\":1}\n");
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<order> out;
  ctx.add(rc::craft()
              .id("l")
              .on_parse_error(rc::parse_error::drop)
              .throttle({.rate = 1, .mode = rc::throttle_mode::reject})
              .from(rc::jsonl<order>({.path = in}))
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(ids(out.bodies()) == std::vector<std::string>{"ok"});
  CHECK(events.count("route:throttle:passed") == 1);
  CHECK(events.count("route:throttle:rejected") == 0);
  CHECK(events.named("route:exchange:dropped")[0].details["reason"] == "parse-failed");
}

TEST_CASE("on_parse_error is a route option: after from() it is RC2001") {
  temp_dir dir;
  auto b = rc::craft().id("l").from(rc::jsonl({.path = dir.file("x.jsonl")}));
  CHECK_THROWS_MATCHES(std::move(b).on_parse_error(rc::parse_error::drop), rc::error,
                       rc::test::rc_error(rc::errc::invalid_dsl, "on_parse_error"));
}

}  // namespace json_test
