// The example of docs/testing.md, verbatim (a ctest checks the two are the same): a throttled
// route that calls an HTTP service, tested without a network and without sleeping.
#include <catch2/catch.hpp>
#include <rc/rc.hpp>
#include <rc/testing.hpp>

using namespace std::chrono_literals;

// The route as production builds it: orders are charged through the billing API, at most two a
// second (the others wait their turn), a failed call is tried again after 200 ms.
rc::route_definition billing_route(std::vector<int> orders) {
  return rc::craft()
      .id("billing")
      .throttle({.rate = 2})
      .from(rc::simple(std::move(orders)))
      .retry({.max_attempts = 3, .backoff = 200ms})
      .request<rc::http_response>(rc::http({.url = "https://billing.example/charge", .method = "POST"}))
      .transform([](rc::http_response r) { return nlohmann::json::parse(r.body); })
      .to(rc::log("charged"))
      .build();
}

TEST_CASE("billing: five orders at 2/s, a 503 retried, no network, no sleeping") {
  rc::testing::test_context tc;

  // The billing API: answers after 50 ms of virtual time; its third call answers 503.
  rc::testing::mock<rc::http_response> billing;
  billing.latency(50ms)
      .reply([](const rc::exchange& ex) {
        return rc::json_response({{"order", ex.body<int>()}});
      })
      .fail_call(3, rc::testing::http_error(503, "https://billing.example/charge", "POST"));
  rc::spy<nlohmann::json> charged;

  tc.override<rc::http_client_endpoint>(billing);  // every rc::http(...) of the routes added next
  tc.override("log", charged);                     // and the log at the end
  tc.add(billing_route({1, 2, 3, 4, 5}));

  tc.start_and_wait_ready();
  tc.run_until_completed(5);

  // Two orders pass at once (the burst), then one every 500 ms. The third call fails at 550 ms
  // and is retried 200 ms later.
  using ms = std::chrono::milliseconds;
  CHECK(billing.call_times() == std::vector<rc::duration>{ms(0), ms(0), ms(500), ms(750), ms(1000), ms(1500)});
  CHECK(billing.reply_times() == std::vector<rc::duration>{ms(50), ms(50), ms(550), ms(800), ms(1050), ms(1550)});
  CHECK(billing.calls()[2].failure->code() == rc::errc::step_failed);
  CHECK(billing.calls()[3].body<int>() == 3);

  CHECK(charged.times() == std::vector<rc::duration>{ms(50), ms(50), ms(800), ms(1050), ms(1550)});
  CHECK(charged.last().body == nlohmann::json{{"order", 5}});
  CHECK(tc.exchanges().completed == 5);
  CHECK(tc.errors().empty());  // the retry recovered: nothing reached context:error
  CHECK(tc.now() == rc::time_point{} + 1550ms);
}
