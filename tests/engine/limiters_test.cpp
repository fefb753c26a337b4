// The rate gates' limiters alone: plain states, plain times, no clock, no route.
#include "rc/gates/limiters.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>

namespace limiters_test {

using namespace std::chrono_literals;

namespace {

rc::time_point at(rc::duration since_epoch) { return rc::time_point{since_epoch}; }

using kind = rc::gate_decision::kind;

rc::throttle_limiter throttle(double rate_per_s, double burst) {
  rc::throttle_limiter l;
  l.params = rc::bucket_params::from(rate_per_s, 1s, burst);
  return l;
}

}  // namespace

TEST_CASE("throttle limiter: a full bucket admits burst arrivals, then queues one interval apart") {
  auto l = throttle(10, 2);  // one token every 100 ms
  rc::token_bucket b;
  rc::throttle_limiter::ticket t;
  CHECK(l.decide(b, {.now = at(0ms)}, t).what == kind::admit);
  CHECK(l.decide(b, {.now = at(0ms)}, t).what == kind::admit);
  const auto third = l.decide(b, {.now = at(0ms)}, t);
  CHECK(third.what == kind::queue);
  CHECK(third.wait == 100ms);
  // Behind one waiter the next ticket is one interval later.
  const auto fourth = l.decide(b, {.now = at(0ms), .queued = 1, .waiting = 1}, t);
  CHECK(fourth.what == kind::queue);
  CHECK(fourth.wait == 200ms);
  CHECK(l.head_wait(b, at(0ms), 2) == 100ms);
}

TEST_CASE("throttle limiter: without a queue place a queue answer takes nothing") {
  auto l = throttle(10, 1);
  rc::token_bucket b;
  rc::throttle_limiter::ticket t;
  REQUIRE(l.decide(b, {.now = at(0ms)}, t).admitted());
  for (int i = 0; i < 3; ++i) {
    const auto d = l.decide(b, {.now = at(0ms), .can_queue = false}, t);
    CHECK(d.what == kind::queue);
    CHECK(d.wait == 100ms);  // unchanged: nothing was taken
  }
  CHECK(l.decide(b, {.now = at(0ms)}, t).wait == 100ms);  // now taken
  CHECK(l.decide(b, {.now = at(0ms), .queued = 1}, t).wait == 200ms);
}

TEST_CASE("throttle limiter: reject mode refuses with the time to the next token and takes nothing") {
  auto l = throttle(4, 1);  // 250 ms
  l.mode = rc::throttle_mode::reject;
  rc::token_bucket b;
  rc::throttle_limiter::ticket t;
  CHECK(l.decide(b, {.now = at(0ms)}, t).admitted());
  const auto r = l.decide(b, {.now = at(100ms)}, t);
  CHECK(r.refused());
  CHECK(r.wait == 150ms);
  CHECK(std::string(r.reason) == "rate limit exceeded");
  CHECK(l.decide(b, {.now = at(250ms)}, t).admitted());
}

TEST_CASE("throttle limiter: max_wait and max_queue refuse instead of queuing") {
  auto l = throttle(10, 1);
  l.max_wait = 150ms;
  l.max_queue = 5;
  rc::token_bucket b;
  rc::throttle_limiter::ticket t;
  REQUIRE(l.decide(b, {.now = at(0ms)}, t).admitted());
  REQUIRE(l.decide(b, {.now = at(0ms)}, t).wait == 100ms);
  const auto too_long = l.decide(b, {.now = at(0ms), .queued = 1, .waiting = 1}, t);
  CHECK(too_long.refused());
  CHECK(too_long.wait == 200ms);
  CHECK(std::string(too_long.reason) == "wait would exceed max_wait");
  l.max_wait.reset();
  const auto full = l.decide(b, {.now = at(0ms), .queued = 1, .waiting = 5}, t);
  CHECK(full.refused());
  CHECK(std::string(full.reason) == "queue is full (max_queue)");
}

TEST_CASE("throttle limiter: a stalled head moves the schedule, a leaver gives its ticket back") {
  auto l = throttle(10, 1);
  rc::token_bucket b;
  rc::throttle_limiter::ticket t;
  REQUIRE(l.decide(b, {.now = at(0ms)}, t).admitted());
  REQUIRE(l.decide(b, {.now = at(0ms)}, t).wait == 100ms);               // ticket 100
  REQUIRE(l.decide(b, {.now = at(0ms), .queued = 1}, t).wait == 200ms);  // ticket 200
  REQUIRE(l.decide(b, {.now = at(0ms), .queued = 2}, t).wait == 300ms);  // ticket 300
  // The head is woken 350 ms late: the three waiters' tickets move 300 ms (whole intervals lost).
  l.head_admitted(b, at(450ms), 3);
  CHECK(l.head_wait(b, at(450ms), 2) == 50ms);  // second ticket: 200 + 300
  // The next waiter leaves: its ticket goes back, the last moves up.
  l.give_back(b, at(450ms));
  CHECK(l.head_wait(b, at(450ms), 1) == 50ms);
  CHECK(!l.idle(b, at(450ms)));
  CHECK(l.idle(b, at(10s)));
}

TEST_CASE("throttle limiter: a full key table is refused for one interval") {
  auto l = throttle(4, 1);
  const auto d = l.table_full();
  CHECK(d.refused());
  CHECK(d.wait == 250ms);
  CHECK(std::string(d.reason) == "key table full");
}

TEST_CASE("slow_down limiter: hits past delay_after wait the rule's delay, clamped to max_delay") {
  rc::slow_down_limiter<rc::fixed_window> l;
  l.window = 10s;
  l.delay_after = 2;
  l.rule = [](std::uint64_t hit) { return std::chrono::milliseconds(100 * hit); };
  l.max_delay = 450ms;
  rc::fixed_window c;
  rc::slow_down_limiter<rc::fixed_window>::ticket t;
  CHECK(l.decide(c, {.now = at(0ms)}, t).admitted());
  CHECK(l.decide(c, {.now = at(0ms)}, t).admitted());
  auto d = l.decide(c, {.now = at(0ms)}, t);
  CHECK(d.what == kind::wait);
  CHECK(d.wait == 300ms);
  CHECK(t.hit.hits == 3);
  l.decide(c, {.now = at(0ms)}, t);
  d = l.decide(c, {.now = at(0ms)}, t);
  CHECK(d.wait == 450ms);  // 500 ms, clamped
  CHECK(!l.idle(c, at(9s)));
  CHECK(l.idle(c, at(10s)));
  CHECK(l.decide(c, {.now = at(10s)}, t).admitted());  // a new window
}

TEST_CASE("slow_down limiter: a delay reaching the deadline is refused with the time until no delay") {
  rc::slow_down_limiter<rc::fixed_window> l;
  l.window = 10s;
  l.delay_after = 1;
  l.rule = 2s;
  rc::fixed_window c;
  rc::slow_down_limiter<rc::fixed_window>::ticket t;
  REQUIRE(l.decide(c, {.now = at(1s)}, t).admitted());
  const auto d = l.decide(c, {.now = at(2s), .deadline = at(3s)}, t);
  CHECK(d.refused());
  CHECK(d.wait == 9s);  // the window ends at 11 s
  CHECK(t.time_left == 1s);
  CHECK(t.delay == 2s);
  // A deadline beyond the delay waits.
  CHECK(l.decide(c, {.now = at(2s), .deadline = at(5s)}, t).what == kind::wait);
}

TEST_CASE("slow_down limiter: a throwing rule is RC5003 naming delay and the hit") {
  rc::slow_down_limiter<rc::sliding_window> l;
  l.window = 1s;
  l.delay_after = 0;
  l.rule = [](std::uint64_t) -> std::chrono::milliseconds { throw std::runtime_error("boom"); };
  rc::sliding_window c;
  rc::slow_down_limiter<rc::sliding_window>::ticket t;
  try {
    l.decide(c, {.now = at(0ms)}, t);
    FAIL("no error");
  } catch (const rc::error& e) {
    CHECK(e.code() == rc::errc::misconfigured);
    CHECK_THAT(e.message(), Catch::Contains("slow_down({ delay }) threw at hit 1"));
  }
}

TEST_CASE("rate_limit limiter: limit hits pass, the rest are refused until a hit leaves the window") {
  rc::rate_limit_limiter<rc::sliding_window> l;
  l.window = 10s;
  l.limit = 2;
  rc::sliding_window c;
  rc::rate_limit_limiter<rc::sliding_window>::ticket t;
  CHECK(l.decide(c, {.now = at(0s)}, t).admitted());
  CHECK(l.decide(c, {.now = at(4s)}, t).admitted());
  const auto d = l.decide(c, {.now = at(5s)}, t);
  CHECK(d.refused());
  CHECK(d.wait == 9s);  // the refused hit counts too: two must leave, the one of 4 s at 14 s
  CHECK(t.hit.hits == 3);
  CHECK(t.reset == 5s);
  CHECK(l.decide(c, {.now = at(10s)}, t).refused());  // refused hits count too
}

TEST_CASE("rate_limit limiter: skip_failed gives a refusal's hit back, outcome gives admitted hits back") {
  rc::rate_limit_limiter<rc::fixed_window> l;
  l.window = 10s;
  l.limit = 1;
  l.skip_failed = true;
  rc::fixed_window c;
  rc::rate_limit_limiter<rc::fixed_window>::ticket t;
  REQUIRE(l.decide(c, {.now = at(0s)}, t).admitted());
  const auto first = t;
  CHECK(l.decide(c, {.now = at(1s)}, t).refused());
  CHECK(c.hits(at(1s)) == 1);  // the refusal gave its hit back
  CHECK(l.wants_outcome());
  l.outcome(c, at(2s), first, /*succeeded=*/false);
  CHECK(c.hits(at(2s)) == 0);
  CHECK(l.decide(c, {.now = at(3s)}, t).admitted());
  l.outcome(c, at(4s), t, /*succeeded=*/true);  // skip_successful is off: counted
  CHECK(c.hits(at(4s)) == 1);
}

TEST_CASE("rate_limit limiter: limit 0 refuses everything until the reset") {
  rc::rate_limit_limiter<rc::fixed_window> l;
  l.window = 30s;
  l.limit = 0;
  rc::fixed_window c;
  rc::rate_limit_limiter<rc::fixed_window>::ticket t;
  const auto d = l.decide(c, {.now = at(0s)}, t);
  CHECK(d.refused());
  CHECK(d.wait == 30s);
}

}  // namespace limiters_test
