// deadline_scope: a cancel_signal fired by its own due time or by the signal it is linked to, on
// a manual clock with no executor (woken coroutines resume inline).
#include <catch2/catch.hpp>
#include <chrono>

#include "rc/clock.hpp"
#include "rc/task.hpp"

namespace deadline_scope_test {

using namespace std::chrono_literals;

namespace {

rc::time_point at(rc::duration d) { return rc::time_point{d}; }

struct sleeper {
  bool woke = false;
  rc::wait_result result = rc::wait_result::elapsed;
  rc::time_point woke_at{};
};

/// A coroutine waiting until `due` or until `signal` fires.
void sleep_on(rc::manual_clock& clock, sleeper& s, rc::time_point due, rc::cancel_signal* signal) {
  rc::spawn([&clock, &s, due, signal]() -> rc::task<void> {
    s.result = co_await clock.wait_until(due, signal);
    s.woke = true;
    s.woke_at = clock.now();
  });
}

void run_to(rc::manual_clock& clock, rc::time_point limit) {
  while (clock.fire_next(limit)) {
  }
  clock.set_now(limit);
}

}  // namespace

TEST_CASE("a deadline fires its signal at its due time and wakes the waits on it") {
  rc::manual_clock clock;
  sleeper s;
  {
    rc::deadline_scope d(clock, nullptr, at(50ms));
    sleep_on(clock, s, at(1s), &d.signal());
    run_to(clock, at(49ms));
    CHECK_FALSE(s.woke);
    run_to(clock, at(60ms));
    CHECK(s.woke);
    CHECK(s.result == rc::wait_result::cancelled);
    CHECK(s.woke_at == at(50ms));
    CHECK(d.signal().deadline_passed());
    CHECK(d.disarm());
  }
  CHECK(clock.pending() == 0);
}

TEST_CASE("a deadline disarmed before its due time leaves no timer and never fires") {
  rc::manual_clock clock;
  {
    rc::deadline_scope d(clock, nullptr, at(50ms));
    CHECK(clock.pending() == 1);
    CHECK_FALSE(d.disarm());
    CHECK(clock.pending() == 0);
    CHECK_FALSE(d.signal().deadline_passed());
  }
  CHECK_FALSE(clock.fire_next(at(1s)));
}

TEST_CASE("nested deadlines: the earliest fires the inner signal, whichever scope it belongs to") {
  const bool outer_earlier = GENERATE(true, false);
  rc::manual_clock clock;
  sleeper s;
  rc::deadline_scope outer(clock, nullptr, at(outer_earlier ? 30ms : 80ms));
  {
    rc::deadline_scope inner(clock, &outer.signal(), at(outer_earlier ? 80ms : 30ms));
    sleep_on(clock, s, at(1s), &inner.signal());
    run_to(clock, at(40ms));
    CHECK(s.woke);
    CHECK(s.woke_at == at(30ms));
    CHECK(inner.signal().deadline_passed());
    CHECK(inner.disarm() == !outer_earlier);
  }
  CHECK(outer.disarm() == outer_earlier);
  CHECK(clock.pending() == 0);
}

TEST_CASE("a parent fired by a client going away fires the linked deadline, not as a deadline") {
  rc::manual_clock clock;
  rc::cancel_signal client(clock);
  sleeper s;
  rc::deadline_scope d(clock, &client, at(1s));
  sleep_on(clock, s, at(1s), &d.signal());
  clock.set_now(at(10ms));
  client.fire();
  CHECK(s.woke);
  CHECK(s.result == rc::wait_result::cancelled);
  CHECK(d.signal().fired());
  CHECK_FALSE(d.signal().deadline_passed());
  CHECK_FALSE(d.disarm());
}

TEST_CASE("a deadline linked to an already fired signal starts fired and arms no timer") {
  rc::manual_clock clock;
  rc::cancel_signal client(clock);
  client.fire();
  rc::deadline_scope d(clock, &client, at(1s));
  CHECK(d.signal().fired());
  CHECK(clock.pending() == 0);
}

TEST_CASE("disarming unlinks from the parent: a later fire of the parent touches nothing") {
  rc::manual_clock clock;
  rc::cancel_signal client(clock);
  int calls = 0;
  {
    rc::deadline_scope a(clock, &client, at(1s));
    rc::deadline_scope b(clock, &client, at(1s));
    a.signal().on_fire([&] { ++calls; });
    b.disarm();
    a.disarm();
  }
  client.fire();
  CHECK(calls == 0);  // a callback of a disarmed deadline is dropped, not called
}

TEST_CASE("callbacks registered on a deadline run when it fires") {
  rc::manual_clock clock;
  int calls = 0;
  rc::deadline_scope d(clock, nullptr, at(5ms));
  d.signal().on_fire([&] { ++calls; });
  run_to(clock, at(10ms));
  CHECK(calls == 1);
}

}  // namespace deadline_scope_test
