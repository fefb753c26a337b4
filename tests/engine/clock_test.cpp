// The scheduler's queued waits (wait_queued + reschedule), which the throttle's FIFO queue uses to
// wake its head: on a manual clock with no executor, so woken coroutines resume inline.
#include "rc/clock.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <vector>

#include "rc/task.hpp"

namespace clock_test {

using namespace std::chrono_literals;

namespace {

rc::time_point at(rc::duration d) { return rc::time_point{d}; }

/// A coroutine parked on a queued wait; `node` is published before it suspends.
struct parked {
  rc::timer_wait* node = nullptr;
  bool started = false;
  bool woke = false;
  rc::wait_result result = rc::wait_result::elapsed;
  rc::time_point woke_at{};
};

void park(rc::manual_clock& clock, parked& p, rc::cancel_signal* signal = nullptr,
          rc::duration early = rc::duration::min()) {
  rc::spawn([&clock, &p, signal, early]() -> rc::task<void> {
    auto wait = clock.wait_queued(signal);
    p.node = &wait.node;
    // A reschedule can come before the waiter suspends (another thread, in the engine).
    if (early != rc::duration::min()) clock.reschedule(*p.node, at(early));
    p.started = true;
    p.result = co_await wait.by_ref();
    p.woke = true;
    p.woke_at = clock.now();
  });
}

}  // namespace

TEST_CASE("a queued wait sleeps until rescheduled, then wakes at the new due time") {
  rc::manual_clock clock;
  parked p;
  park(clock, p);
  REQUIRE(p.started);
  CHECK_FALSE(clock.fire_next(at(1h)));  // due time::max(): never fires on its own
  clock.reschedule(*p.node, at(30ms));
  CHECK(clock.next_due() == at(30ms));
  CHECK(clock.fire_next(at(1h)));
  CHECK(p.woke);
  CHECK(p.result == rc::wait_result::elapsed);
  CHECK(p.woke_at == at(30ms));
}

TEST_CASE("a reschedule that comes before the wait suspends is kept, even a due time in the past") {
  rc::manual_clock clock;
  clock.set_now(at(50ms));
  parked p;
  park(clock, p, nullptr, 10ms);
  CHECK_FALSE(p.woke);  // queued, not completed inline, though its due time has passed
  CHECK(clock.next_due() == at(10ms));
  CHECK(clock.fire_next(at(50ms)));
  CHECK(p.woke);
  CHECK(p.woke_at == at(50ms));
}

TEST_CASE("rescheduling a wait that a signal already ended leaves it alone") {
  rc::manual_clock clock;
  rc::cancel_signal stop(clock);
  rc::cancel_signal done(clock);
  parked p;
  rc::spawn([&]() -> rc::task<void> {
    auto wait = clock.wait_queued(&stop);
    p.node = &wait.node;
    p.result = co_await wait.by_ref();
    p.woke = true;
    co_await clock.wait_until(rc::time_point::max(), &done);  // keeps `wait` alive meanwhile
  });
  stop.fire();
  REQUIRE(p.woke);
  CHECK(p.result == rc::wait_result::cancelled);
  clock.reschedule(*p.node, at(5ms));  // the waiter was woken: nothing to move, nothing queued
  CHECK(clock.next_due() == rc::time_point::max());
  done.fire();
  CHECK(clock.pending() == 0);
}

}  // namespace clock_test
