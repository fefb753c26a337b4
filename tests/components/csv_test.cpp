// csv(): the RFC 4180 reader, the source (rows, records, user types), the destination (quoting,
// header row), the transformer, parse failures in each on_parse_error mode, streaming in bounded
// memory, missing files. Virtual time throughout.
#include <catch2/catch.hpp>
#include <fstream>
#include <rc/rc.hpp>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"
#include "support/temp_dir.hpp"

namespace csv_test {

using rc::test::event_recorder;
using rc::test::temp_dir;
using rows = std::vector<rc::csv_row>;

namespace people {
struct person {
  std::string name;
  std::string city;
  bool operator==(const person&) const = default;
};
void to_json(nlohmann::json& j, const person& p) { j = {{"name", p.name}, {"city", p.city}}; }
void from_json(const nlohmann::json& j, person& p) {
  j.at("name").get_to(p.name);
  j.at("city").get_to(p.city);
}
}  // namespace people

using people::person;

namespace {

struct read_result {
  rows records;
  std::vector<std::uint64_t> lines;
  std::string error;  // of the first malformed record
};

read_result read_all(const std::string& text, std::size_t max = 1 << 20) {
  rc::detail::byte_input in{std::string_view(text)};
  rc::detail::csv_reader r(in, ',', max);
  read_result out;
  rc::csv_row fields;
  for (;;) {
    const auto st = r.next(fields);
    if (st == rc::detail::read_status::end) break;
    if (st == rc::detail::read_status::malformed) {
      if (out.error.empty()) out.error = r.error();
      continue;
    }
    out.records.push_back(fields);
    out.lines.push_back(r.line());
  }
  return out;
}

}  // namespace

// ---- the reader ---------------------------------------------------------------------------------

TEST_CASE("csv reader: RFC 4180 quoting, escaped quotes, embedded delimiters and line breaks") {
  const auto r = read_all("a,\"b,c\",\"say \"\"hi\"\"\"\r\n\"two\nlines\",,x\r\n\"\",e,\"\"\"\"\n");
  CHECK(r.error.empty());
  CHECK(r.records == rows{{"a", "b,c", "say \"hi\""}, {"two\nlines", "", "x"}, {"", "e", "\""}});
  CHECK(r.lines == std::vector<std::uint64_t>{1, 2, 4});
}

TEST_CASE("csv reader: LF and CRLF endings, a last record without one, blank lines skipped") {
  CHECK(read_all("a,b\nc,d").records == rows{{"a", "b"}, {"c", "d"}});
  CHECK(read_all("a,b\r\n\r\n\nc,d\r\n").records == rows{{"a", "b"}, {"c", "d"}});
  CHECK(read_all("a,b\r\n\r\n\nc,d\r\n").lines == std::vector<std::uint64_t>{1, 4});
  CHECK(read_all("a,\n").records == rows{{"a", ""}});
  CHECK(read_all("").records.empty());
  // A quote inside an unquoted field is a character; a lone CR inside a field too.
  CHECK(read_all("ab\"c,d\re\n").records == rows{{"ab\"c", "d\re"}});
}

TEST_CASE("csv reader: malformed records say why, and reading goes on after them") {
  const auto junk = read_all("a,\"b\"x,c\nd,e,f\n");
  CHECK(junk.error.find("after a closing quote on line 1") != std::string::npos);
  CHECK(junk.records == rows{{"d", "e", "f"}});
  const auto open = read_all("a,b\n\"never closed,c\nd\n");
  CHECK(open.error == "unterminated quoted field (opened on line 2)");
  CHECK(open.records == rows{{"a", "b"}});
  const auto big = read_all("a,b\n" + std::string(50, 'x') + ",y\nc,d\n", 20);
  CHECK(big.error.find("max_record_bytes") != std::string::npos);
  CHECK(big.records == rows{{"a", "b"}, {"c", "d"}});
}

// ---- source -------------------------------------------------------------------------------------

TEST_CASE("csv: a header row names the fields of csv_record bodies, headers give record and line") {
  temp_dir dir;
  const auto in = dir.write("in.csv", "name,city\r\nAda,London\r\n\"Grace, Rear Admiral\",\"New\nYork\"\r\nLin,Paris");
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::csv_record> out;
  ctx.add(rc::craft().id("c").from(rc::csv<rc::csv_record>({.path = in})).to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(out.count() == 3);
  CHECK(out.bodies()[0] == rc::csv_record{{"name", "Ada"}, {"city", "London"}});
  CHECK(out.bodies()[1] == rc::csv_record{{"name", "Grace, Rear Admiral"}, {"city", "New\nYork"}});
  const auto r = out.received();
  CHECK(*r[2].headers.find("routecraft.csv.record") == 4);
  CHECK(*r[2].headers.find("routecraft.csv.line") == 5);
  CHECK(*r[2].headers.find("routecraft.csv.path") == in);
}

TEST_CASE("csv: rows without a header, a user type through from_json, columns name headerless files") {
  temp_dir dir;
  const auto plain = dir.write("plain.csv", "Ada,London\nLin,Paris\n");
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::csv_row> as_rows;
  rc::spy<person> as_people;
  ctx.add(rc::craft().id("r").from(rc::csv({.path = plain, .header = false})).to(as_rows));
  ctx.add(rc::craft()
              .id("p")
              .from(rc::csv<person>({.path = plain, .header = false, .columns = {"name", "city"}}))
              .to(as_people));
  ctx.start();
  ctx.drain();
  CHECK(as_rows.bodies() == rows{{"Ada", "London"}, {"Lin", "Paris"}});
  CHECK(as_people.bodies() == std::vector<person>{{"Ada", "London"}, {"Lin", "Paris"}});
}

namespace {

// Record 2 (line 2) good, 3 has a field too few, 4 good, 5 opens a quote never closed.
std::string mixed_csv(const temp_dir& dir) {
  return dir.write("mixed.csv", "name,city\nAda,London\nBob\nLin,Paris\n\"Eve,Rome\nMax,Oslo\n");
}

}  // namespace

TEST_CASE("csv, on_parse_error fail: wrong field count and unterminated quote fail with RC5016") {
  temp_dir dir;
  const auto in = mixed_csv(dir);
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<person> out;
  ctx.add(rc::craft().id("c").on_parse_error(rc::parse_error::fail).from(rc::csv<person>({.path = in})).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<person>{{"Ada", "London"}, {"Lin", "Paris"}});
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 2);
  CHECK(failed[0].details["error"]["code"] == "RC5016");
  CHECK(failed[0].details["error"]["message"] == "csv \"" + in + "\" record 3 (line 3): 1 fields, expected 2");
  CHECK(failed[1].details["error"]["message"] ==
        "csv \"" + in + "\" record 5 (line 5): unterminated quoted field (opened on line 5)");
  CHECK(events.count("route:parse:failed") == 2);
}

TEST_CASE("csv, on_parse_error drop: bad records are dropped as \"parse-failed\"") {
  temp_dir dir;
  const auto in = mixed_csv(dir);
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<person> out;
  ctx.add(rc::craft().id("c").on_parse_error(rc::parse_error::drop).from(rc::csv<person>({.path = in})).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<person>{{"Ada", "London"}, {"Lin", "Paris"}});
  const auto dropped = events.named("route:exchange:dropped");
  REQUIRE(dropped.size() == 2);
  CHECK(dropped[0].details["reason"] == "parse-failed");
  CHECK(events.count("route:exchange:failed") == 0);
  CHECK(events.named("route:parse:failed")[1].details["error"]["message"].get<std::string>().find("unterminated") !=
        std::string::npos);
}

TEST_CASE("csv, on_parse_error abort: the first bad record fails, then no later record is read") {
  temp_dir dir;
  const auto in = mixed_csv(dir);
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<person> out;
  ctx.add(rc::craft().id("c").on_parse_error(rc::parse_error::abort).from(rc::csv<person>({.path = in})).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<person>{{"Ada", "London"}});
  CHECK(events.count("route:exchange:started") == 2);
  REQUIRE(events.count("route:exchange:failed") == 1);
  CHECK(events.named("route:exchange:failed")[0].details["error"]["code"] == "RC5016");
}

TEST_CASE("csv: strict off lets a short record through") {
  temp_dir dir;
  const auto in = dir.write("loose.csv", "a,b\n1,2\n3\n");
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::csv_row> out;
  ctx.add(rc::craft().id("c").from(rc::csv({.path = in, .strict = false})).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == rows{{"1", "2"}, {"3"}});
}

TEST_CASE("csv: a malformed header row fails the source with RC5016") {
  temp_dir dir;
  const auto in = dir.write("h.csv", "\"name,city\n");
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:source:failed");
  ctx.add(rc::craft().id("c").from(rc::csv<rc::csv_record>({.path = in})).to(rc::noop()));
  ctx.start();
  ctx.drain();
  REQUIRE(events.count("route:source:failed") == 1);
  CHECK(events.all()[0].details["error"]["code"] == "RC5016");
}

TEST_CASE("csv: 200,000 records stream through in bounded memory") {
  temp_dir dir;
  const auto in = dir.file("many.csv");
  {
    std::ofstream f(in);
    f << "id,name,note\n";
    for (int i = 0; i < 200000; ++i) f << i << ",name " << i << ",\"quoted, with \"\"quotes\"\"\"\n";
  }
  rc::context ctx(rc::virtual_time);
  std::size_t n = 0;
  bool all_right = true;
  auto& rt = ctx.add(
      rc::craft().id("c").from(rc::csv<rc::csv_record>({.path = in, .chunk_bytes = 8192})).to([&](rc::csv_record& r) {
        all_right = all_right && r["id"] == std::to_string(n) && r["note"] == "quoted, with \"quotes\"";
        ++n;
      }));
  ctx.start();
  ctx.drain();
  CHECK(n == 200000);
  CHECK(all_right);
  const auto* src = dynamic_cast<const rc::csv_file<rc::csv_record>*>(rt.definition().source.get());
  REQUIRE(src != nullptr);
  CHECK(src->peak_buffered() > 8192);
  CHECK(src->peak_buffered() <= 8192 + 3 * 32);  // a chunk plus one record's three short fields
}

TEST_CASE("csv: a missing file is RC5014, bad options are RC5003") {
  temp_dir dir;
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:source:failed");
  ctx.add(rc::craft().id("c").from(rc::csv({.path = dir.file("nope.csv")})).to(rc::noop()));
  ctx.start();
  ctx.drain();
  REQUIRE(events.count("route:source:failed") == 1);
  CHECK(events.all()[0].details["error"]["code"] == "RC5014");
  CHECK_THROWS_MATCHES(rc::csv({.path = "x", .delimiter = '"'}), rc::error,
                       rc::test::rc_error(rc::errc::misconfigured, "delimiter"));
  CHECK_THROWS_MATCHES(rc::csv<rc::csv_record>({.path = "x", .header = false}), rc::error,
                       rc::test::rc_error(rc::errc::misconfigured, "header"));
}

// ---- destination, transformer -------------------------------------------------------------------

TEST_CASE("csv: the destination quotes fields when needed, writes the header once, and reads back") {
  temp_dir dir;
  const auto out = dir.file("out.csv");
  const std::vector<person> ps{{"Ada", "London"}, {"Grace \"Amazing\" Hopper", "New York, NY"}, {"Two\nLines", " x"}};
  for (int round = 0; round < 2; ++round) {  // the second run appends to a file that has its header
    rc::context ctx(rc::virtual_time);
    ctx.add(rc::craft().id("w").from(rc::sequence(ps)).to(rc::csv({.path = out})));
    ctx.start();
    ctx.drain();
  }
  // A person's JSON object lists its keys in order (city, name): so do the columns.
  const std::string once =
      "London,Ada\r\n\"New York, NY\",\"Grace \"\"Amazing\"\" Hopper\"\r\n\" x\",\"Two\nLines\"\r\n";
  CHECK(temp_dir::read(out) == "city,name\r\n" + once + once);
  rc::context ctx(rc::virtual_time);
  rc::spy<person> back;
  ctx.add(rc::craft().id("r").from(rc::csv<person>({.path = out})).to(back));
  ctx.start();
  ctx.drain();
  CHECK(back.bodies() == std::vector<person>{ps[0], ps[1], ps[2], ps[0], ps[1], ps[2]});
}

TEST_CASE("csv: the destination takes rows and records, columns fix the order") {
  temp_dir dir;
  const auto a = dir.file("rows.csv");
  const auto b = dir.file("records.csv");
  rc::context ctx(rc::virtual_time);
  ctx.add(
      rc::craft().id("a").from(rc::sequence(rows{{"1", "x,y"}, {"2", ""}})).to(rc::csv({.path = a, .crlf = false})));
  ctx.add(rc::craft()
              .id("b")
              .from(rc::sequence(std::vector<rc::csv_record>{{{"b", "2"}, {"a", "1"}}, {{"a", "3"}}}))
              .to(rc::csv({.path = b, .columns = {"b", "a"}, .crlf = false})));
  ctx.start();
  ctx.drain();
  CHECK(temp_dir::read(a) == "1,\"x,y\"\n2,\n");  // rows have no names: no header row
  CHECK(temp_dir::read(b) == "b,a\n2,1\n,3\n");
}

TEST_CASE("csv: the transformer parses a string into records and writes them back") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::vector<person>> parsed;
  rc::spy<std::string> text;
  ctx.add(rc::craft()
              .id("t")
              .from(rc::simple(std::string("name,city\nAda,\"London, UK\"\n")))
              .transform(rc::csv<person>())
              .tap(parsed)
              .transform(rc::csv<person>())
              .to(text));
  ctx.start();
  ctx.drain();
  REQUIRE(parsed.count() == 1);
  CHECK(parsed.bodies()[0] == std::vector<person>{{"Ada", "London, UK"}});
  CHECK(text.bodies() == std::vector<std::string>{"city,name\r\n\"London, UK\",Ada\r\n"});
}

TEST_CASE("csv and jsonl destinations: a file that cannot be written fails the exchange with RC5014") {
  temp_dir dir;
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:failed");
  ctx.add(rc::craft().id("c").from(rc::simple(rc::csv_row{"a"})).to(rc::csv({.path = dir.file("no/dir/o.csv")})));
  ctx.add(rc::craft().id("l").from(rc::simple(1)).to(rc::jsonl({.path = dir.file("no/dir/o.jsonl")})));
  ctx.start();
  ctx.drain();
  const auto failed = events.all();
  REQUIRE(failed.size() == 2);
  for (const auto& e : failed) {
    CHECK(e.details["error"]["code"] == "RC5014");
    CHECK(e.details["error"]["message"].get<std::string>().find("No such file or directory") != std::string::npos);
  }
}

}  // namespace csv_test
