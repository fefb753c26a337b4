// detail::timer_race, the helpers behind context_options::timer_race: when they poke (never before
// the instant aimed at, once per instant, never for an instant taken up or moved), in real time.
// Each case waits a few ms of real time; none asserts how late a poke comes.
#include "rc/timer_race.hpp"

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "support/eventually.hpp"

namespace timer_race_test {

using namespace std::chrono_literals;
using clock = rc::detail::timer_race::clock;

namespace {

/// Waits (up to 5 s, for a loaded machine) until `done()`; returns `done()`.
template <class Done>
bool eventually(Done&& done) {
  return rc::test::eventually(5s, std::forward<Done>(done), 100us);
}

/// A timer_race whose poke records when it ran.
struct recorder {
  std::mutex mutex;
  std::vector<clock::time_point> at;
  rc::detail::timer_race race{[this] {
    std::lock_guard lock(mutex);
    at.push_back(clock::now());
  }};

  std::size_t count() {
    std::lock_guard lock(mutex);
    return at.size();
  }
  /// Waits (up to 5 s, for a loaded machine) until `n` pokes have run; true if they did.
  bool await(std::size_t n) {
    return eventually([&] { return count() >= n; });
  }
  clock::time_point last() {
    std::lock_guard lock(mutex);
    return at.back();
  }
};

// On a machine (or cpuset) with one core there are no helpers: nothing to test.
bool has_helpers(const recorder& r) {
  if (r.race.helpers() == 0) WARN("one core: timer_race has no helpers here");
  return r.race.helpers() > 0;
}

}  // namespace

TEST_CASE("timer_race: one helper per core it may run on, at most the number asked for") {
  rc::detail::timer_race one([] {}, 1);
  CHECK(one.helpers() == 0);  // a single helper would race nothing
  rc::detail::timer_race race([] {});
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores >= 2) CHECK(race.helpers() == std::min(cores, 4U));
  one.aim(clock::now());  // no helpers: aim() does nothing
  CHECK(one.pokes() == 0);
}

TEST_CASE("timer_race: pokes once for an instant, not before it") {
  recorder r;
  if (!has_helpers(r)) return;
  const auto at = clock::now() + 3ms;
  r.race.aim(at);
  REQUIRE(r.await(1));
  CHECK(r.last() >= at);
  std::this_thread::sleep_for(10ms);
  CHECK(r.count() == 1);  // every helper woke; one poked
  CHECK(r.race.pokes() == 1);
}

TEST_CASE("timer_race: each of a series of instants is poked, in turn") {
  // Every instant after the one before: the helpers, asleep until the previous one, learn of the
  // next without a wake-up (and asleep after a poke, with one).
  recorder r;
  if (!has_helpers(r)) return;
  for (std::size_t k = 1; k <= 20; ++k) {
    const auto at = clock::now() + 1ms;
    r.race.aim(at);
    REQUIRE(r.await(k));
    CHECK(r.last() >= at);
  }
}

TEST_CASE("timer_race: an instant moved earlier is poked at the earlier one, the later never") {
  recorder r;
  if (!has_helpers(r)) return;
  r.race.aim(clock::now() + 10s);
  std::this_thread::sleep_for(2ms);  // the helpers asleep until the later instant
  const auto at = clock::now() + 2ms;
  r.race.aim(at);
  REQUIRE(r.await(1));
  CHECK(r.last() >= at);
  CHECK(r.count() == 1);
}

TEST_CASE("timer_race: an instant moved later is not poked at the old one") {
  recorder r;
  if (!has_helpers(r)) return;
  // The second aim must come before the first instant: 50 ms leaves room for a preempted thread
  // on a loaded machine.
  const auto start = clock::now();
  r.race.aim(start + 50ms);
  r.race.aim(start + 100ms);
  REQUIRE(r.await(1));
  CHECK(r.last() >= start + 100ms);
}

TEST_CASE("timer_race: an instant taken up before it comes is not poked") {
  recorder r;
  if (!has_helpers(r)) return;
  r.race.aim(clock::now() + 50ms);  // taken() must come first, even on a loaded machine
  r.race.taken();
  std::this_thread::sleep_for(100ms);
  CHECK(r.count() == 0);
  // And the next aim is poked as usual.
  const auto at = clock::now() + 1ms;
  r.race.aim(at);
  REQUIRE(r.await(1));
  CHECK(r.last() >= at);
}

#if defined(__linux__)
TEST_CASE("timer_race: the poke comes from another core than the one aim() was called on") {
  // The caller's own timer for the instant is on its core: a helper there would add nothing.
  std::atomic<int> poked_on{-1};
  rc::detail::timer_race race([&] { poked_on = ::sched_getcpu(); });
  if (race.helpers() == 0) return;
  cpu_set_t allowed;
  REQUIRE(::sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  int first = 0;
  while (!CPU_ISSET(first, &allowed)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(::pthread_setaffinity_np(::pthread_self(), sizeof one, &one) == 0);
  race.aim(clock::now() + 1ms);
  REQUIRE(::pthread_setaffinity_np(::pthread_self(), sizeof allowed, &allowed) == 0);
  REQUIRE(eventually([&] { return poked_on.load() >= 0; }));
  CHECK(poked_on.load() != first);
  CHECK(race.pokes() == 1);
}
#endif

TEST_CASE("timer_race: a poke that throws loses its race and nothing else") {
  std::atomic<int> calls{0};
  rc::detail::timer_race race([&] {
    ++calls;
    throw std::runtime_error("poke failed");
  });
  if (race.helpers() == 0) return;
  race.aim(clock::now() + 1ms);
  REQUIRE(eventually([&] { return calls.load() >= 1; }));
  CHECK(calls.load() == 1);
  race.aim(clock::now() + 1ms);  // the helpers still run
  REQUIRE(eventually([&] { return calls.load() >= 2; }));
  CHECK(calls.load() == 2);
}

}  // namespace timer_race_test
