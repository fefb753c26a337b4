// Logging: the .log() / .debug() steps and the rc::log() destination, written through the log sink
// (rc/logging.hpp). Each test installs a logger writing to a string and asserts the exact lines.
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <catch2/catch.hpp>
#include <memory>
#include <rc/rc.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"

namespace log_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;

namespace {

/// Installs a logger that writes "<level> <line>" into a string, for the test's lifetime; the
/// default logger comes back afterwards.
class captured_log {
 public:
  explicit captured_log(spdlog::level::level_enum level = spdlog::level::trace)
      : logger_(std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::ostream_sink_st>(out_))) {
    logger_->set_pattern("%l %v");
    logger_->set_level(level);
    rc::set_log_sink(logger_);
  }
  ~captured_log() { rc::set_log_sink(nullptr); }
  captured_log(const captured_log&) = delete;
  captured_log& operator=(const captured_log&) = delete;

  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> logger_;
};

/// Exchange ids in the order the route saw them (the lines name them).
struct id_recorder {
  std::vector<std::string> ids;
  auto step() {
    return [this](rc::exchange& ex) { ids.push_back(ex.id()); };
  }
};

struct order {
  std::string tenant;
  double amount;
};

}  // namespace

TEST_CASE(".log() writes one info line per exchange: route id, exchange id, body as JSON, body unchanged") {
  captured_log log;
  rc::context ctx(rc::virtual_time);
  id_recorder seen;
  rc::spy<std::string> out;
  ctx.add(rc::craft()
              .id("greetings")
              .from(rc::simple(std::vector<std::string>{"hi", "ho"}))
              .process(seen.step())
              .log()
              .to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(seen.ids.size() == 2);
  CHECK(log.lines() == std::vector<std::string>{"info [greetings] " + seen.ids[0] + " \"hi\"",
                                                "info [greetings] " + seen.ids[1] + " \"ho\""});
  CHECK(out.bodies() == std::vector<std::string>{"hi", "ho"});
}

TEST_CASE(".log(formatter) writes the formatter's text, given the body and the exchange, at the level asked") {
  captured_log log;
  rc::context ctx(rc::virtual_time);
  id_recorder seen;
  ctx.add(rc::craft()
              .id("orders")
              .from(rc::simple(std::vector<order>{{"acme", 120.5}}))
              .header("region", "eu")
              .process(seen.step())
              .log([](const order& o, const rc::exchange& ex) {
                return fmt::format("{} owes {:.2f} ({})", o.tenant, o.amount, ex.header_or("region", "?"));
              })
              .log([](const order& o) { return "big order from " + o.tenant; }, rc::log_level::warn)
              .to(rc::noop()));
  ctx.start();
  ctx.drain();
  REQUIRE(seen.ids.size() == 1);
  CHECK(log.lines() == std::vector<std::string>{"info [orders] " + seen.ids[0] + " acme owes 120.50 (eu)",
                                                "warning [orders] " + seen.ids[0] + " big order from acme"});
}

TEST_CASE(".debug() writes the body and the headers at level debug, which the default level leaves out") {
  rc::context ctx(rc::virtual_time);
  id_recorder seen;
  int formatted = 0;
  ctx.add(rc::craft()
              .id("d")
              .from(rc::simple(std::vector<int>{7}))
              .header("tenant", "acme")
              .process(seen.step())
              .debug()
              .debug([&formatted](int n) {
                ++formatted;
                return "n is " + std::to_string(n);
              })
              .to(rc::noop()));
  SECTION("a logger at debug level shows both lines") {
    captured_log log(spdlog::level::debug);
    ctx.start();
    ctx.drain();
    REQUIRE(seen.ids.size() == 1);
    CHECK(log.lines() == std::vector<std::string>{"debug [d] " + seen.ids[0] + " 7 headers={\"tenant\":\"acme\"}",
                                                  "debug [d] " + seen.ids[0] + " n is 7"});
    CHECK(formatted == 1);
  }
  SECTION("a logger at info level shows none, and the formatter is not called") {
    captured_log log(spdlog::level::info);
    ctx.start();
    ctx.drain();
    CHECK(log.lines().empty());
    CHECK(formatted == 0);
  }
}

TEST_CASE("a .log() step is a step labelled log (debug for .debug()), operation tap, adapter log") {
  captured_log log;
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:step:started");
  ctx.add(rc::craft().id("l").from(rc::simple(std::vector<int>{1})).log().debug().to(rc::noop()));
  ctx.start();
  ctx.drain();
  const auto steps = events.all();
  REQUIRE(steps.size() == 3);
  CHECK(steps[0].details["operation"] == "log");
  CHECK(steps[0].details["adapter"] == "log");
  CHECK(steps[1].details["operation"] == "debug");
}

TEST_CASE("a formatter that throws is reported as route:step:error and the exchange goes on") {
  captured_log log;
  rc::context ctx(rc::virtual_time);
  event_recorder errors(ctx, "route:step:error");
  event_recorder completed(ctx, "route:exchange:completed");
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("f")
              .from(rc::simple(std::vector<int>{1}))
              .log([](int) -> std::string { throw std::runtime_error("cannot format"); })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(log.lines().empty());
  REQUIRE(errors.count("route:step:error") == 1);
  const auto e = errors.all()[0];
  CHECK(e.details["operation"] == "log");
  CHECK(e.details["error"]["code"] == "RC5001");
  CHECK(e.details["error"]["message"] == "cannot format");
  CHECK(out.bodies() == std::vector<int>{1});
  CHECK(completed.count("route:exchange:completed") == 1);
}

TEST_CASE("the rc::log() destination writes through the same sink, after its prefix, at its level") {
  captured_log log;
  rc::context ctx(rc::virtual_time);
  id_recorder seen;
  ctx.add(rc::craft()
              .id("dest")
              .from(rc::simple(std::vector<int>{3}))
              .process(seen.step())
              .to(rc::log())
              .to(rc::log("audit", rc::log_level::error)));
  ctx.start();
  ctx.drain();
  REQUIRE(seen.ids.size() == 1);
  CHECK(log.lines() ==
        std::vector<std::string>{"info [dest] " + seen.ids[0] + " 3", "error audit [dest] " + seen.ids[0] + " 3"});
}

TEST_CASE("set_log_sink(nullptr) puts the default logger back, and log_sink() names the one in use") {
  auto mine = std::make_shared<spdlog::logger>("mine");
  const auto original = rc::log_sink();
  rc::set_log_sink(mine);
  CHECK(rc::log_sink() == mine);
  rc::set_log_sink(nullptr);
  CHECK(rc::log_sink() == original);
  CHECK(original->name() == "routecraft");
  CHECK(rc::log_enabled(rc::log_level::info));
  CHECK_FALSE(rc::log_enabled(rc::log_level::debug));
}

}  // namespace log_test
