// The circuit breaker's state machine alone, on plain time values.
#include <catch2/catch.hpp>
#include <rc/gates/breaker.hpp>

namespace breaker_test {

using namespace std::chrono_literals;

namespace {

rc::time_point at(rc::duration d) { return rc::time_point{} + d; }

const rc::breaker_params params{.threshold = 3, .window = 60s, .cooldown = 30s, .half_open_max = 1};

/// Admits one call at `t` and fails it.
rc::breaker::transition fail_at(rc::breaker& b, rc::duration t, const rc::breaker_params& p = params) {
  const auto a = b.admit(at(t), p);
  REQUIRE(a.admitted);
  return b.on_failure(a.t, at(t), p);
}

}  // namespace

TEST_CASE("breaker: threshold failures within the window open it, fewer do not") {
  rc::breaker b;
  CHECK(fail_at(b, 0s) == rc::breaker::transition::none);
  CHECK(fail_at(b, 1s) == rc::breaker::transition::none);
  CHECK(b.current() == rc::breaker::state::closed);
  CHECK(fail_at(b, 2s) == rc::breaker::transition::opened);
  CHECK(b.current() == rc::breaker::state::open);
  CHECK(b.failure_count() == 3);
}

TEST_CASE("breaker: failures that slid out of the window do not count") {
  rc::breaker b;
  fail_at(b, 0s);
  fail_at(b, 10s);
  // At 61s the failure at 0s is older than the 60s window: two in the window, still closed.
  CHECK(fail_at(b, 61s) == rc::breaker::transition::none);
  CHECK(b.current() == rc::breaker::state::closed);
  CHECK(b.failure_count() == 2);
  CHECK(fail_at(b, 62s) == rc::breaker::transition::opened);
}

TEST_CASE("breaker: successes while closed do not reset the failure window") {
  rc::breaker b;
  fail_at(b, 0s);
  fail_at(b, 1s);
  const auto ok = b.admit(at(2s), params);
  CHECK(b.on_success(ok.t) == rc::breaker::transition::none);
  CHECK(fail_at(b, 3s) == rc::breaker::transition::opened);
}

TEST_CASE("breaker: open refuses with the time left in the cooldown, then half-opens after it") {
  rc::breaker b;
  for (auto t : {0s, 1s, 2s}) fail_at(b, t);
  const auto refused = b.admit(at(12s), params);
  CHECK_FALSE(refused.admitted);
  CHECK(refused.retry_after == 20s);  // opened at 2s, cooldown 30s
  const auto probe = b.admit(at(32s), params);
  CHECK(probe.admitted);
  CHECK(probe.became_half_open);
  CHECK(probe.t.probe);
  CHECK(b.current() == rc::breaker::state::half_open);
}

TEST_CASE("breaker: half-open admits half_open_max probes and refuses the rest") {
  rc::breaker_params p = params;
  p.half_open_max = 2;
  rc::breaker b;
  for (auto t : {0s, 1s, 2s}) fail_at(b, t, p);
  CHECK(b.admit(at(40s), p).admitted);
  CHECK(b.admit(at(40s), p).admitted);
  const auto third = b.admit(at(40s), p);
  CHECK_FALSE(third.admitted);
  CHECK(third.retry_after == 0s);
}

TEST_CASE("breaker: a probe success closes it and clears the failures") {
  rc::breaker b;
  for (auto t : {0s, 1s, 2s}) fail_at(b, t);
  const auto probe = b.admit(at(40s), params);
  CHECK(b.on_success(probe.t) == rc::breaker::transition::closed);
  CHECK(b.current() == rc::breaker::state::closed);
  CHECK(b.failure_count() == 0);
  // Two new failures do not re-open it: the old ones were forgotten.
  fail_at(b, 41s);
  CHECK(fail_at(b, 42s) == rc::breaker::transition::none);
}

TEST_CASE("breaker: a probe failure re-opens it with failure count 1 and a fresh cooldown") {
  rc::breaker b;
  for (auto t : {0s, 1s, 2s}) fail_at(b, t);
  const auto probe = b.admit(at(40s), params);
  CHECK(b.on_failure(probe.t, at(41s), params) == rc::breaker::transition::opened);
  CHECK(b.current() == rc::breaker::state::open);
  CHECK(b.failure_count() == 1);
  const auto refused = b.admit(at(50s), params);
  CHECK_FALSE(refused.admitted);
  CHECK(refused.retry_after == 21s);  // re-opened at 41s
}

TEST_CASE("breaker: outcomes of calls admitted before it opened are ignored (non-probe while half-open)") {
  rc::breaker b;
  const auto early = b.admit(at(0s), params);  // admitted while closed, still running
  for (auto t : {1s, 2s, 3s}) fail_at(b, t);
  const auto probe = b.admit(at(40s), params);
  REQUIRE(probe.t.probe);
  CHECK(b.on_failure(early.t, at(41s), params) == rc::breaker::transition::none);
  CHECK(b.on_success(early.t) == rc::breaker::transition::none);
  CHECK(b.current() == rc::breaker::state::half_open);
  CHECK(b.on_success(probe.t) == rc::breaker::transition::closed);
}

TEST_CASE("breaker: idle only when closed with no failure left in the window") {
  rc::breaker b;
  CHECK(b.idle(at(0s), params));
  fail_at(b, 0s);
  CHECK_FALSE(b.idle(at(30s), params));
  CHECK(b.idle(at(61s), params));
  fail_at(b, 61s);
  fail_at(b, 62s);
  fail_at(b, 63s);
  CHECK_FALSE(b.idle(at(500s), params));  // open: never idle
}

}  // namespace breaker_test
