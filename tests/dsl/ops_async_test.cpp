// transform / process / filter / validate / enrich with plain and coroutine callables, in
// virtual time: coroutine forms, enrich targets and aggregators, drop reasons, RC5002 and RC5001.
#include <catch2/catch.hpp>
#include <optional>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"

namespace ops_async_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;
using rc::test::in_ms;

namespace {

struct order {
  int id = 0;
  double price = 0;
  std::string customer;
};
struct quote {
  double price = 0;
  std::string currency;
};
struct priced {
  int id = 0;
  double total = 0;
};

std::string error_code(const rc::test::recorded_event& e) { return e.details["error"]["code"].get<std::string>(); }
std::string error_message(const rc::test::recorded_event& e) {
  return e.details["error"]["message"].get<std::string>();
}

/// A direct route "pricing" answering each order with a quote of 10 x its id, after `wait`.
void add_pricing(rc::context& ctx, rc::duration wait = 0ms) {
  ctx.add(rc::craft().id("pricing").from(rc::direct<order>("pricing")).delay(wait).transform([](order o) {
    return quote{10.0 * o.id, "EUR"};
  }));
}

}  // namespace

// ---- coroutine callables ---------------------------------------------------------------------

TEST_CASE("async transform: a transform returning rc::task awaits the clock and completes at the exact time") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  ctx.add(rc::craft()
              .id("t")
              .from(rc::simple(std::vector<int>{1, 2}))
              .transform([](int v, rc::exchange& ex) -> rc::task<std::string> {
                co_await rc::sleep_for(ex, 25ms);
                co_return std::to_string(v * 10);
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<std::string>{"10", "20"});
  // rc::simple starts both at 0 without waiting for either: each completes 25 ms after it started.
  CHECK(in_ms(out.times()) == std::vector<double>{25, 25});
}

TEST_CASE("async transform: a coroutine awaits a direct request and uses the reply") {
  rc::context ctx(rc::virtual_time);
  add_pricing(ctx, 5ms);
  rc::spy<double> out;
  ctx.add(rc::craft()
              .id("main")
              .from(rc::simple(order{3, 0, "ann"}))
              .transform([](order o, rc::exchange& ex) -> rc::task<double> {
                quote q = co_await rc::request<quote>(rc::direct<order>("pricing"), o, ex);
                co_return q.price + 1;
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<double>{31});
  CHECK(in_ms(out.times()) == std::vector<double>{5});
}

TEST_CASE("async process: a coroutine process edits the exchange after a sleep") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("p")
              .from(rc::simple(4))
              .process([](rc::exchange& ex) -> rc::task<void> {
                co_await rc::sleep_for(ex, 7ms);
                ex.body<int>() *= 2;
                ex.set_header("seen", true);
              })
              .to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(out.bodies() == std::vector<int>{8});
  CHECK(in_ms(out.times()) == std::vector<double>{7});
  CHECK(out.received()[0].headers.find("seen")->get<bool>());
}

TEST_CASE("async transform: a coroutine that throws fails the exchange with RC5001 and the message") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:failed");
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("t")
              .from(rc::simple(1))
              .transform([](int v, rc::exchange& ex) -> rc::task<int> {
                co_await rc::sleep_for(ex, 1ms);
                if (v == 1) throw std::runtime_error("no luck");
                co_return v;
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies().empty());
  const auto failed = events.all();
  REQUIRE(failed.size() == 1);
  CHECK(error_code(failed[0]) == "RC5001");
  CHECK(error_message(failed[0]) == "no luck");
}

TEST_CASE("async transform: step retry re-runs a coroutine transform that failed") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  int calls = 0;
  ctx.add(rc::craft()
              .id("t")
              .from(rc::simple(5))
              .retry({.max_attempts = 3, .backoff = 10ms})
              .transform([&calls](int v, rc::exchange& ex) -> rc::task<int> {
                co_await rc::sleep_for(ex, 1ms);
                if (++calls < 2) throw std::runtime_error("flaky");
                co_return v + 1;
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(calls == 2);
  CHECK(out.bodies() == std::vector<int>{6});
  CHECK(in_ms(out.times()) == std::vector<double>{12});  // 1 ms, 10 ms backoff, 1 ms
}

// ---- enrich ----------------------------------------------------------------------------------

TEST_CASE("enrich: from a direct endpoint without aggregator the reply becomes the body") {
  rc::context ctx(rc::virtual_time);
  add_pricing(ctx, 3ms);
  rc::spy<quote> out;
  ctx.add(
      rc::craft().id("main").from(rc::simple(order{2, 0, "bo"})).enrich<quote>(rc::direct<order>("pricing")).to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(out.bodies().size() == 1);
  CHECK(out.bodies()[0].price == 20);
  CHECK(out.bodies()[0].currency == "EUR");
  CHECK(in_ms(out.times()) == std::vector<double>{3});
}

TEST_CASE("enrich: from a direct endpoint with an aggregator combining original and reply") {
  rc::context ctx(rc::virtual_time);
  add_pricing(ctx);
  rc::spy<priced> out;
  ctx.add(rc::craft()
              .id("main")
              .from(rc::simple(order{4, 0, "cy"}))
              .enrich<quote>(rc::direct<order>("pricing"),
                             [](order o, quote q) {
                               return priced{o.id, q.price * 2};
                             })
              .to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(out.bodies().size() == 1);
  CHECK(out.bodies()[0].id == 4);
  CHECK(out.bodies()[0].total == 80);
}

TEST_CASE("enrich: an aggregator may take the exchange too") {
  rc::context ctx(rc::virtual_time);
  add_pricing(ctx);
  rc::spy<order> out;
  ctx.add(rc::craft()
              .id("main")
              .from(rc::simple(order{1, 0, "di"}))
              .enrich<quote>(rc::direct<order>("pricing"),
                             [](order& o, quote&& q, rc::exchange& ex) {
                               o.price = q.price;
                               ex.set_header("currency", q.currency);
                             })
              .to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(out.bodies().size() == 1);
  CHECK(out.bodies()[0].price == 10);
  CHECK(out.received()[0].headers.find("currency")->get<std::string>() == "EUR");
}

TEST_CASE("enrich: only(get, into) assigns one field of the reply into the original body") {
  rc::context ctx(rc::virtual_time);
  add_pricing(ctx);
  rc::spy<order> out;
  ctx.add(rc::craft()
              .id("main")
              .from(rc::simple(order{7, 0, "ed"}))
              .enrich<quote>(rc::direct<order>("pricing"), rc::only(&quote::price, &order::price))
              .to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(out.bodies().size() == 1);
  CHECK(out.bodies()[0].id == 7);
  CHECK(out.bodies()[0].customer == "ed");
  CHECK(out.bodies()[0].price == 70);
}

TEST_CASE("enrich: only(get) makes one field of the result the body") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  ctx.add(rc::craft()
              .id("main")
              .from(rc::simple(order{7, 0, "ed"}))
              .enrich(
                  [](const order& o) {
                    return quote{1.0 * o.id, "USD"};
                  },
                  rc::only(&quote::currency))
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<std::string>{"USD"});
}

TEST_CASE("enrich: none() runs the fetch and keeps the body as it was") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  std::vector<int> fetched;
  ctx.add(rc::craft()
              .id("main")
              .from(rc::simple(std::vector<int>{1, 2}))
              .enrich(
                  [&fetched](const int& v) {
                    fetched.push_back(v);
                    return std::string("ignored");
                  },
                  rc::none())
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(fetched == std::vector<int>{1, 2});
  CHECK(out.bodies() == std::vector<int>{1, 2});
}

TEST_CASE("enrich: a coroutine fetcher is awaited and its result replaces the body") {
  rc::context ctx(rc::virtual_time);
  rc::spy<quote> out;
  ctx.add(rc::craft()
              .id("main")
              .from(rc::simple(order{5, 0, "fi"}))
              .enrich([](const order& o, rc::exchange& ex) -> rc::task<quote> {
                co_await rc::sleep_for(ex, 40ms);
                co_return quote{o.id * 1.5, "GBP"};
              })
              .to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(out.bodies().size() == 1);
  CHECK(out.bodies()[0].price == 7.5);
  CHECK(in_ms(out.times()) == std::vector<double>{40});
}

TEST_CASE("enrich: a direct endpoint nobody serves fails the exchange with RC5004") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:failed");
  rc::spy<quote> out;
  ctx.add(rc::craft().id("main").from(rc::simple(order{1, 0, "x"})).enrich<quote>(rc::direct<order>("nobody")).to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies().empty());
  REQUIRE(events.count("route:exchange:failed") == 1);
  CHECK(error_code(events.all()[0]) == "RC5004");
  CHECK(error_message(events.all()[0]).find("nobody") != std::string::npos);
}

TEST_CASE("enrich: a fetcher that throws fails the exchange with RC5001 and the error handler sees it") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:failed");
  rc::spy<order> out;
  std::vector<std::string> seen;
  ctx.add(rc::craft()
              .id("main")
              .from(rc::simple(std::vector<int>{1, 2}))
              .enrich([](const int& v) -> order {
                if (v == 2) throw std::runtime_error("lookup failed");
                return order{v, 0, "ok"};
              })
              .to(out));
  ctx.add(rc::craft()
              .id("handled")
              .error([&seen](const rc::error& e, rc::exchange&) {
                seen.push_back(e.code_string() + " " + e.message());
                return rc::recovery::drop();
              })
              .from(rc::simple(3))
              .enrich([](const int&, rc::exchange& ex) -> rc::task<int> {
                co_await rc::sleep_for(ex, 1ms);
                throw std::runtime_error("late failure");
              })
              .to(rc::log()));
  ctx.start();
  ctx.drain();
  REQUIRE(out.bodies().size() == 1);
  CHECK(out.bodies()[0].id == 1);
  REQUIRE(events.count("route:exchange:failed") == 1);
  CHECK(error_code(events.all()[0]) == "RC5001");
  CHECK(error_message(events.all()[0]) == "lookup failed");
  CHECK(seen == std::vector<std::string>{"RC5001 late failure"});
}

// ---- validate --------------------------------------------------------------------------------

TEST_CASE("validate: the validator's result replaces the body and may coerce it to another type") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("v")
              .from(rc::simple(std::vector<std::string>{" 12", "7 "}))
              .validate([](const std::string& s) { return std::stoi(s); })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{12, 7});
}

TEST_CASE("validate: a failure is RC5002 with the validator's message, not retried, and the body is kept") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<order> out;
  int calls = 0;
  std::vector<std::string> handled;
  ctx.add(rc::craft()
              .id("v")
              .error([&handled](const rc::error& e, rc::exchange& ex) {
                handled.push_back(e.code_string() + " " + ex.body<order>().customer);
                return rc::recovery::drop("invalid");
              })
              .from(rc::simple(std::vector<order>{{1, 5, "ok"}, {2, -1, "neg"}}))
              .retry({.max_attempts = 3, .backoff = 1ms})
              .validate([&calls](order o) {
                ++calls;
                if (o.price < 0) throw std::invalid_argument("price must be >= 0, got " + std::to_string(int(o.price)));
                return o;
              })
              .to(out));
  ctx.start();
  ctx.drain();
  REQUIRE(out.bodies().size() == 1);
  CHECK(out.bodies()[0].id == 1);
  CHECK(calls == 2);  // RC5002 is not retryable: one call each
  CHECK(handled == std::vector<std::string>{"RC5002 neg"});
  const auto invoked = events.named("route:error-handler:invoked");
  REQUIRE(invoked.size() == 1);
  CHECK(invoked[0].details["originalError"]["code"] == "RC5002");
  CHECK(invoked[0].details["originalError"]["message"] == "price must be >= 0, got -1");
  CHECK(invoked[0].details["failedOperation"] == "validate");
}

TEST_CASE("validate: a void validator only checks, a coroutine validator is awaited") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:failed");
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("v")
              .from(rc::simple(std::vector<int>{1, -1, 3}))
              .validate([](const int& v) {
                if (v < 0) throw std::range_error("negative");
              })
              .validate([](const int& v, const rc::exchange& ex) -> rc::task<int> {
                co_await rc::sleep_for(ex, 2ms);
                if (v == 3) throw std::invalid_argument("three is not allowed");
                co_return v * 10;
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{10});
  const auto failed = events.all();
  REQUIRE(failed.size() == 2);
  CHECK(error_code(failed[0]) == "RC5002");
  CHECK(error_message(failed[0]) == "negative");
  CHECK(error_code(failed[1]) == "RC5002");
  CHECK(error_message(failed[1]) == "three is not allowed");
}

TEST_CASE("validate: an rc::error thrown by the validator passes unchanged") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:failed");
  ctx.add(rc::craft()
              .id("v")
              .from(rc::simple(1))
              .validate([](const int&) -> int { throw rc::error(rc::errc::misconfigured, "bad rules"); })
              .to(rc::log()));
  ctx.start();
  ctx.drain();
  REQUIRE(events.count("route:exchange:failed") == 1);
  CHECK(error_code(events.all()[0]) == "RC5003");
}

// ---- filter ----------------------------------------------------------------------------------

TEST_CASE("filter: rc::drop(reason) and an optional reason drop with that reason, bool drops as filtered") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx, "route:exchange:dropped");
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("f")
              .from(rc::simple(std::vector<int>{1, 2, 3, 4, 5, 6}))
              .filter([](const int& v, const rc::exchange&) { return v == 2 ? rc::drop("two") : rc::keep(); })
              .filter([](const int& v) -> std::optional<std::string> {
                if (v == 4) return "four";
                return std::nullopt;
              })
              .filter([](const int& v) { return v != 6; })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{1, 3, 5});
  std::vector<std::string> reasons;
  for (const auto& e : events.all()) reasons.push_back(e.details["reason"].get<std::string>());
  CHECK(reasons == std::vector<std::string>{"two", "four", "filtered"});
}

TEST_CASE("filter: the predicate sees the exchange's headers") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  ctx.add(
      rc::craft()
          .id("f")
          .from(rc::simple(std::vector<int>{1, 2}))
          .header("tenant", [](const rc::exchange& ex) { return ex.id().size() > 0 ? "acme" : ""; })
          .filter([](const int& v, const rc::exchange& ex) { return ex.header_or("tenant", "") == "acme" && v == 2; })
          .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{2});
}

TEST_CASE("filter: a coroutine predicate is awaited, a throwing one is RC5001 Filter predicate threw") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  rc::spy<int> out;
  ctx.add(rc::craft()
              .id("f")
              .from(rc::simple(std::vector<int>{1, 2, 3}))
              .filter([](const int& v, const rc::exchange& ex) -> rc::task<rc::verdict> {
                co_await rc::sleep_for(ex, 4ms);
                if (v == 3) throw std::runtime_error("cannot decide");
                co_return v == 1 ? rc::keep() : rc::drop("slow-no");
              })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(out.bodies() == std::vector<int>{1});
  CHECK(in_ms(out.times()) == std::vector<double>{4});
  const auto dropped = events.named("route:exchange:dropped");
  REQUIRE(dropped.size() == 1);
  CHECK(dropped[0].details["reason"] == "slow-no");
  const auto failed = events.named("route:exchange:failed");
  REQUIRE(failed.size() == 1);
  CHECK(error_code(failed[0]) == "RC5001");
  CHECK(error_message(failed[0]) == "Filter predicate threw: cannot decide");
}

TEST_CASE("sleep: a coroutine sleeping when the context stops is woken as cancelled") {
  rc::context ctx(rc::virtual_time);
  std::vector<rc::wait_result> results;
  ctx.add(rc::craft()
              .id("s")
              .from(rc::simple(1))
              .process([&results](rc::exchange& ex) -> rc::task<void> {
                results.push_back(co_await rc::sleep_for(ex, std::chrono::hours(1)));
              })
              .to(rc::log()));
  ctx.start();
  ctx.advance(10ms);
  ctx.stop();
  REQUIRE(results.size() == 1);
  CHECK(results[0] == rc::wait_result::cancelled);
}

}  // namespace ops_async_test
