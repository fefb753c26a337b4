// rc::directory: glob matching, one exchange per file with its metadata, .done/.error moves,
// polling on the engine clock, and the claim protocol: two pollers on one folder process every
// file exactly once, also when one is stopped with `forced` in the middle or its process dies.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <map>
#include <rc/rc.hpp>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"
#include "support/slow_work.hpp"
#include "support/temp_dir.hpp"

namespace directory_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;
using rc::test::in_ms;
using rc::test::names_in;
using rc::test::rc_error;
using rc::test::slurp;
using rc::test::spit;
using rc::test::temp_dir;

namespace {

std::string file_name(const rc::exchange& ex) { return ex.header_or("routecraft.file.name", ""); }

/// Counts runs that reached the end of the route, per file name.
struct tally {
  std::map<std::string, int> seen;
  auto recorder() {
    return [this](rc::exchange& ex) { ++seen[file_name(ex)]; };
  }
  bool exactly_once(int n) const {
    if (static_cast<int>(seen.size()) != n) return false;
    for (const auto& [name, count] : seen)
      if (count != 1) return false;
    return true;
  }
};

void make_files(const temp_dir& dir, int n) {
  for (int i = 0; i < n; ++i) spit(dir / fmt::format("f{:05d}.csv", i), fmt::format("row,{}\n", i));
}

std::size_t count_in(const std::string& folder) { return names_in(folder).size(); }

}  // namespace

// ---- glob --------------------------------------------------------------------------------------

TEST_CASE("glob_match: *, ?, sets, ranges, negation, escapes, hidden names") {
  struct row {
    const char* pattern;
    const char* name;
    bool match;
  };
  const row table[] = {
      {"*", "a.csv", true},
      {"*", "", true},
      {"*.csv", "orders.csv", true},
      {"*.csv", "orders.csv.tmp", false},
      {"*.csv", "csv", false},
      {"*.csv", ".hidden.csv", false},
      {".*.csv", ".hidden.csv", true},
      {"a*b*c", "axxbyyc", true},
      {"a*b*c", "axxbyy", false},
      {"a*b*c", "abcbc", true},
      {"?.txt", "a.txt", true},
      {"?.txt", "ab.txt", false},
      {"[abc].txt", "b.txt", true},
      {"[abc].txt", "d.txt", false},
      {"[a-c]1", "c1", true},
      {"[a-c]1", "d1", false},
      {"[!a-c]1", "d1", true},
      {"[!a-c]1", "a1", false},
      {"[^x]", "y", true},
      {"[]]", "]", true},
      {"\\*", "*", true},
      {"\\*", "a", false},
      {"file[", "file[", true},
      {"**.log", "x.log", true},
      {"report-2024-??.csv", "report-2024-07.csv", true},
      {"report-2024-??.csv", "report-2024-7.csv", false},
  };
  for (const auto& r : table) {
    INFO(r.pattern << " vs " << r.name);
    CHECK(rc::glob_match(r.pattern, r.name) == r.match);
  }
}

// ---- one poller --------------------------------------------------------------------------------

TEST_CASE("directory: one exchange per matching file, with metadata, files move to .done") {
  temp_dir dir;
  spit(dir / "b.csv", "2\n");
  spit(dir / "a.csv", "1\n");
  spit(dir / "notes.txt", "skip me");
  spit(dir / ".c.csv", "hidden: skipped");
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  ctx.add(rc::craft().id("d").from(rc::directory(dir.path(), {.glob = "*.csv", .stop_when_empty = true})).to(out));
  ctx.start();
  ctx.drain();
  const auto got = out.received();
  REQUIRE(got.size() == 2);
  CHECK(got[0].body == "1\n");  // name order
  CHECK(got[1].body == "2\n");
  CHECK(*got[0].headers.find("routecraft.file.name") == "a.csv");
  CHECK(*got[0].headers.find("routecraft.file.path") == dir / "a.csv");
  CHECK(*got[0].headers.find("routecraft.file.size") == 2);
  CHECK(got[0].headers.find("routecraft.file.modifiedMs")->get<std::int64_t>() > 1'600'000'000'000);
  CHECK(got[0].headers.find("routecraft.directory.claimedPath")->get<std::string>().find("/.processing/") !=
        std::string::npos);
  CHECK(names_in(dir / ".done") == std::vector<std::string>{"a.csv", "b.csv"});
  CHECK(slurp(dir / ".done/a.csv") == "1\n");
  CHECK(names_in(dir.path()) == std::vector<std::string>{".c.csv", ".done", ".error", ".processing", "notes.txt"});
  CHECK(names_in(dir / ".processing").empty());  // a clean exit leaves no claim and no lock
}

TEST_CASE("directory: on_success = remove deletes the file") {
  temp_dir dir;
  make_files(dir, 3);
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  ctx.add(rc::craft()
              .id("d")
              .from(rc::directory(dir.path(), {.on_success = rc::done_action::remove, .stop_when_empty = true}))
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.count() == 3);
  CHECK(names_in(dir.path()) == std::vector<std::string>{".error", ".processing"});
}

TEST_CASE("directory: a failed run moves the file to .error with a note, a dropped one counts as done") {
  temp_dir dir;
  spit(dir / "bad.csv", "boom");
  spit(dir / "good.csv", "fine");
  spit(dir / "skip.csv", "filtered");
  rc::context ctx(rc::virtual_time);
  ctx.add(rc::craft()
              .id("d")
              .from(rc::directory(dir.path(), {.stop_when_empty = true}))
              .filter([](const std::string& body) { return body != "filtered"; })
              .to([](std::string& body) {
                if (body == "boom") throw rc::error(rc::errc::validation, "row 1: amount missing");
              }));
  ctx.start();
  ctx.drain();
  CHECK(names_in(dir / ".done") == std::vector<std::string>{"good.csv", "skip.csv"});
  CHECK(names_in(dir / ".error") == std::vector<std::string>{"bad.csv", "bad.csv.error.json"});
  const auto note = nlohmann::json::parse(slurp(dir / ".error/bad.csv.error.json"));
  CHECK(note["code"] == "RC5002");
  CHECK(note["message"] == "row 1: amount missing");
  CHECK(note["file"] == "bad.csv");
}

TEST_CASE("directory: content = false gives the claimed file's path, readable during the run") {
  temp_dir dir;
  spit(dir / "huge.bin", "pretend this is 50 GB");
  rc::context ctx(rc::virtual_time);
  std::vector<std::string> read;
  ctx.add(rc::craft()
              .id("d")
              .from(rc::directory(dir.path(), {.content = false, .stop_when_empty = true}))
              .to([&](std::string& path) { read.push_back(slurp(path)); }));
  ctx.start();
  ctx.drain();
  CHECK(read == std::vector<std::string>{"pretend this is 50 GB"});
}

TEST_CASE("directory: polls every interval of engine time") {
  temp_dir dir;
  spit(dir / "first.csv", "1");
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  ctx.add(rc::craft().id("d").from(rc::directory(dir.path(), {.interval = 1s})).to(out));
  ctx.start();
  ctx.advance(0ms);
  CHECK(out.bodies() == std::vector<std::string>{"1"});
  spit(dir / "second.csv", "2");
  ctx.advance(999ms);
  CHECK(out.count() == 1);  // the next poll is at 1 s
  ctx.advance(1ms);
  CHECK(out.bodies() == std::vector<std::string>{"1", "2"});
  CHECK(in_ms(out.times()) == std::vector<double>{0, 1000});
  ctx.stop();
  CHECK(names_in(dir / ".processing").empty());
}

TEST_CASE("directory: a missing folder fails the source with RC5014") {
  temp_dir dir;
  rc::context ctx(rc::virtual_time);
  event_recorder errors(ctx, "context:error");
  ctx.add(rc::craft().id("d").from(rc::directory(dir / "nope", {.stop_when_empty = true})).to(rc::noop()));
  ctx.start();
  ctx.drain();
  REQUIRE(errors.count("context:error") == 1);
  CHECK(errors.all()[0].details["error"]["code"] == "RC5014");
  CHECK(errors.all()[0].details["error"]["message"].get<std::string>().find("ENOENT") != std::string::npos);
}

TEST_CASE("directory options are checked when the source is made (RC5003)") {
  CHECK_THROWS_MATCHES(rc::directory("d", {.glob = ""}), rc::error,
                       rc_error(rc::errc::misconfigured, "directory({ glob })"));
  CHECK_THROWS_MATCHES(rc::directory("d", {.glob = "a/*.csv"}), rc::error,
                       rc_error(rc::errc::misconfigured, "directory({ glob })"));
  CHECK_THROWS_MATCHES(rc::directory("d", {.interval = 0ms}), rc::error,
                       rc_error(rc::errc::misconfigured, "directory({ interval }) must be a duration > 0, got 0ms."));
  CHECK_THROWS_MATCHES(rc::directory("d", {.owner = "../x"}), rc::error,
                       rc_error(rc::errc::misconfigured, "directory({ owner })"));
  CHECK_THROWS_MATCHES(rc::directory("d", {.chunk_size = 1}), rc::error,
                       rc_error(rc::errc::misconfigured, "directory({ chunk_size })"));
}

TEST_CASE("directory: two pollers may not share one owner id (RC5003)") {
  temp_dir dir;
  rc::context a(rc::virtual_time), b(rc::virtual_time);
  event_recorder errors(b, "context:error");
  a.add(rc::craft().id("d").from(rc::directory(dir.path(), {.owner = "node-1"})).to(rc::noop()));
  b.add(rc::craft().id("d").from(rc::directory(dir.path(), {.owner = "node-1"})).to(rc::noop()));
  a.start();
  a.advance(0ms);
  b.start();
  b.advance(0ms);
  REQUIRE(errors.count("context:error") == 1);
  CHECK(errors.all()[0].details["error"]["code"] == "RC5003");
  a.stop();
  b.stop();
}

// ---- claims: several pollers, crashes ----------------------------------------------------------

TEST_CASE("directory: two contexts on one folder process each of 2,000 files exactly once") {
  temp_dir dir;
  make_files(dir, 2000);
  tally t;
  rc::context a(rc::virtual_time), b(rc::virtual_time);
  for (rc::context* ctx : {&a, &b})
    ctx->add(rc::craft().id("d").from(rc::directory(dir.path(), {.interval = 5ms})).delay(1ms).process(t.recorder()));
  a.start();
  b.start();
  int steps = 0;
  while (t.seen.size() < 2000 && ++steps < 10'000) {
    a.advance(1ms);
    b.advance(1ms);
  }
  a.stop();
  b.stop();
  CHECK(t.exactly_once(2000));
  CHECK(count_in(dir / ".done") == 2000);
  CHECK(names_in(dir / ".processing").empty());
  CHECK(names_in(dir / ".error").empty());
  // Both did a share of the work (they interleave file by file).
  CHECK(steps < 1200);
}

TEST_CASE("directory: a context stopped with forced in the middle loses nothing and duplicates nothing") {
  // A, B and (after A's forced stop) C poll one folder. A's run in flight when it is stopped is
  // abandoned: that file stays claimed by A until A lets go of its lock, then another poller
  // claims it and runs it. Every file reaches the end of the route exactly once.
  temp_dir dir;
  make_files(dir, 2000);
  tally t;
  auto log = std::make_shared<rc::test::work_log>();
  const auto route = [&] {
    return rc::craft()
        .id("d")
        .from(rc::directory(dir.path(), {.interval = 5ms}))
        .to(rc::test::slow_work(3ms, log, /*listens=*/false))  // ignores stop: a forced stop cuts it
        .process(t.recorder());
  };
  auto a = std::make_unique<rc::context>(rc::virtual_time, rc::context_options{.shutdown_timeout = 1ms});
  rc::context b(rc::virtual_time), c(rc::virtual_time);
  a->add(route());
  b.add(route());
  a->start();
  b.start();
  for (int i = 0; i < 300; ++i) {
    a->advance(1ms);
    b.advance(1ms);
  }
  const std::size_t before = t.seen.size();
  CHECK(before > 100);
  CHECK(before < 1000);
  const rc::stop_result r = a->stop();
  CHECK(r.forced);
  // A's abandoned file is still claimed under A's folder.
  std::size_t claimed_by_a = 0;
  for (const auto& n : names_in(dir / ".processing"))
    if (n.find(".lock") == std::string::npos) claimed_by_a += count_in(dir / (".processing/" + n));
  CHECK(claimed_by_a >= 1);
  c.add(route());
  c.start();
  int steps = 0;
  while (t.seen.size() < 2000 && ++steps < 20'000) {
    b.advance(1ms);
    c.advance(1ms);
  }
  b.stop();
  c.stop();
  CHECK(t.exactly_once(2000));
  CHECK(count_in(dir / ".done") == 2000);
  CHECK(names_in(dir / ".processing").empty());
  a.reset();  // frees A's abandoned run; nothing moves any more
  CHECK(count_in(dir / ".done") == 2000);
}

TEST_CASE("directory: claims of a process that died are taken over by the next poller") {
  temp_dir dir;
  make_files(dir, 5);
  // A child process claims the first file and dies in the middle of its run (no clean-up at all:
  // the kernel drops its lock).
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    rc::context ctx(rc::virtual_time);
    ctx.add(rc::craft().id("d").from(rc::directory(dir.path(), {.owner = "crashing"})).to([](std::string&) {
      ::_exit(0);
    }));
    ctx.start();
    ctx.advance(0ms);
    ::_exit(1);  // not reached
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(names_in(dir / ".processing/crashing") == std::vector<std::string>{"f00000.csv"});
  CHECK(count_in(dir.path()) == 4 + 3);  // four files left, plus .processing, .done, .error

  tally t;
  rc::context ctx(rc::virtual_time);
  ctx.add(rc::craft().id("d").from(rc::directory(dir.path(), {.stop_when_empty = true})).process(t.recorder()));
  ctx.start();
  ctx.drain();
  CHECK(t.exactly_once(5));
  CHECK(count_in(dir / ".done") == 5);
  CHECK(names_in(dir / ".processing").empty());
}

TEST_CASE("directory: a restarted poller with a stable owner id takes back its own claims") {
  temp_dir dir;
  make_files(dir, 2);
  // What a crash under owner "node-1" leaves: a lock file nobody holds, one claimed file.
  std::filesystem::create_directories(dir / ".processing/node-1");
  spit(dir / ".processing/node-1.lock", "");
  std::filesystem::rename(dir / "f00000.csv", dir / ".processing/node-1/f00000.csv");
  tally t;
  rc::context ctx(rc::virtual_time);
  ctx.add(rc::craft()
              .id("d")
              .from(rc::directory(dir.path(), {.stop_when_empty = true, .owner = "node-1"}))
              .process(t.recorder()));
  ctx.start();
  ctx.drain();
  CHECK(t.exactly_once(2));
  CHECK(names_in(dir / ".processing").empty());
}

TEST_CASE("directory: on a real-time context with two threads, a batch folder is drained and done") {
  temp_dir dir;
  make_files(dir, 50);
  std::atomic<int> runs{0};
  rc::context ctx(rc::context_options{.threads = 2});
  ctx.add(rc::craft()
              .id("d")
              .from(rc::directory(dir.path(), {.interval = 10ms, .stop_when_empty = true}))
              .process([&](rc::exchange&) { ++runs; }));
  ctx.start();
  ctx.drain();
  const rc::stop_result r = ctx.stop();
  CHECK_FALSE(r.forced);
  CHECK(runs == 50);
  CHECK(count_in(dir / ".done") == 50);
  CHECK(names_in(dir / ".processing").empty());
}

}  // namespace directory_test
