#include "rc/gates/token_bucket.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

namespace token_bucket_test {

using namespace std::chrono_literals;

namespace {

rc::time_point at(rc::duration since_epoch) { return rc::time_point{since_epoch}; }

std::vector<rc::duration> reserve_n(rc::token_bucket& bucket, const rc::bucket_params& p, rc::time_point now, int n) {
  std::vector<rc::duration> waits;
  for (int i = 0; i < n; ++i) waits.push_back(bucket.reserve(now, p));
  return waits;
}

std::vector<rc::duration> ms(std::initializer_list<std::int64_t> values) {
  std::vector<rc::duration> out;
  for (auto v : values) out.push_back(std::chrono::milliseconds(v));
  return out;
}

constexpr rc::duration one_day = 24h;

}  // namespace

TEST_CASE("bucket params take capacity max(1, burst or rate) and one token every per / rate") {
  const auto plain = rc::bucket_params::from(5, 1s, std::nullopt);
  CHECK(plain.capacity == 5);
  CHECK(plain.interval_ns == 200'000'000);

  const auto burst = rc::bucket_params::from(2, 1s, 1);
  CHECK(burst.capacity == 1);
  CHECK(burst.interval_ns == 500'000'000);

  const auto slow = rc::bucket_params::from(0.5, 1s, 0.5);
  CHECK(slow.capacity == 1);
  CHECK(slow.interval_ns == 2'000'000'000);

  CHECK(rc::bucket_params::from(100, 1min, std::nullopt).interval_ns == 600'000'000);
  CHECK(rc::bucket_params::from(1, 24h, std::nullopt).interval_ns == 86'400'000'000'000);
  CHECK(rc::bucket_params::from(10, 1s, 25).capacity == 25);
}

TEST_CASE(
    "a bucket of rate 5 per second paces the sixth and seventh simultaneous arrivals at 200 "
    "and 400 ms") {
  const auto p = rc::bucket_params::from(5, 1s, std::nullopt);
  rc::token_bucket bucket;
  CHECK(reserve_n(bucket, p, at(3ms), 7) == ms({0, 0, 0, 0, 0, 200, 400}));
}

TEST_CASE("a bucket of rate 2 with burst 1 makes the second simultaneous arrival wait 500 ms") {
  const auto p = rc::bucket_params::from(2, 1s, 1);
  rc::token_bucket bucket;
  CHECK(reserve_n(bucket, p, at(0ms), 2) == ms({0, 500}));
}

TEST_CASE(
    "a bucket of rate 10 and burst 10 admits ten at once and paces the rest in exact 100 ms "
    "steps") {
  const auto p = rc::bucket_params::from(10, 1s, 10);
  // Also far from the epoch (100 days), where a double still counts whole nanoseconds exactly.
  for (const rc::duration start : {rc::duration(0), rc::duration(123'456'789), 100 * one_day}) {
    rc::token_bucket bucket;
    const auto waits = reserve_n(bucket, p, at(start), 25);
    for (std::size_t i = 0; i < waits.size(); ++i) {
      CHECK(waits[i] == rc::duration(std::max(0, int(i) - 9) * std::int64_t{100'000'000}));
    }
  }
}

TEST_CASE("a bucket of rate 1 in reject mode admits, then rejects with retry_after 1 s") {
  const auto p = rc::bucket_params::from(1, 1s, std::nullopt);
  rc::token_bucket bucket;
  const auto first = bucket.try_acquire(at(0ms), p);
  const auto second = bucket.try_acquire(at(0ms), p);
  const auto third = bucket.try_acquire(at(0ms), p);
  CHECK(first.admitted);
  CHECK(first.retry_after == 0ns);
  CHECK_FALSE(second.admitted);
  CHECK(second.retry_after == 1000ms);
  CHECK_FALSE(third.admitted);
  CHECK(third.retry_after == 1000ms);
}

TEST_CASE("reject mode takes no token, so rejections never delay the next admission") {
  const auto p = rc::bucket_params::from(1, 1s, std::nullopt);
  rc::token_bucket bucket;
  REQUIRE(bucket.try_acquire(at(0ms), p).admitted);
  for (int i = 0; i < 100; ++i) REQUIRE_FALSE(bucket.try_acquire(at(400ms), p).admitted);
  CHECK(bucket.try_acquire(at(400ms), p).retry_after == 600ms);
  CHECK(bucket.tokens(at(400ms), p) == Approx(0.4));
  CHECK(bucket.try_acquire(at(1000ms), p).admitted);
}

TEST_CASE("reject mode admits exactly when reserve would not have to wait") {
  const auto p = rc::bucket_params::from(3, 1s, std::nullopt);
  std::mt19937_64 random(7);
  rc::token_bucket bucket;
  rc::time_point now = at(0ms);
  for (int i = 0; i < 10'000; ++i) {
    now += rc::duration(random() % 500'000'000);
    const auto expected_wait = bucket.peek_wait(now, p);
    const auto result = bucket.try_acquire(now, p);
    REQUIRE(result.admitted == (expected_wait == 0ns));
    REQUIRE(result.retry_after == expected_wait);
  }
}

TEST_CASE("delay mode goes into debt and repays it at the rate") {
  const auto p = rc::bucket_params::from(5, 1s, std::nullopt);
  rc::token_bucket bucket;
  reserve_n(bucket, p, at(0ms), 7);
  CHECK(bucket.tokens(at(0ms), p) == Approx(-2));
  CHECK(bucket.tokens(at(400ms), p) == Approx(0).margin(1e-12));
  CHECK(bucket.peek_wait(at(400ms), p) == 200ms);
  CHECK(bucket.reserve(at(600ms), p) == 0ns);
  CHECK(bucket.reserve(at(600ms), p) == 200ms);
}

TEST_CASE("a bucket refills over time but never beyond its capacity") {
  const auto p = rc::bucket_params::from(10, 1s, 4);
  rc::token_bucket bucket;
  CHECK(bucket.tokens(at(0ms), p) == 4);
  reserve_n(bucket, p, at(0ms), 4);
  CHECK(bucket.tokens(at(0ms), p) == 0);
  CHECK(bucket.tokens(at(250ms), p) == Approx(2.5));
  CHECK(bucket.tokens(at(10s), p) == 4);
  CHECK(reserve_n(bucket, p, at(10s), 5) == ms({0, 0, 0, 0, 100}));
}

TEST_CASE("peek_wait reports what reserve then returns and changes nothing") {
  const auto p = rc::bucket_params::from(7, 1s, 3);
  std::mt19937_64 random(42);
  rc::token_bucket bucket;
  rc::time_point now = at(0ms);
  for (int i = 0; i < 10'000; ++i) {
    now += rc::duration(random() % 300'000'000);
    const auto peeked = bucket.peek_wait(now, p);
    REQUIRE(bucket.peek_wait(now, p) == peeked);
    REQUIRE(bucket.reserve(now, p) == peeked);
  }
}

TEST_CASE("give_back returns one token and never fills a bucket above its capacity") {
  const auto p = rc::bucket_params::from(5, 1s, std::nullopt);
  rc::token_bucket bucket;
  reserve_n(bucket, p, at(0ms), 7);
  bucket.give_back(at(0ms), p);
  CHECK(bucket.tokens(at(0ms), p) == Approx(-1));
  CHECK(bucket.peek_wait(at(0ms), p) == 400ms);

  rc::token_bucket full;
  full.give_back(at(0ms), p);
  full.give_back(at(0ms), p);
  CHECK(full.tokens(at(0ms), p) == 5);
  CHECK(reserve_n(full, p, at(0ms), 6) == ms({0, 0, 0, 0, 0, 200}));
}

TEST_CASE("is_full is true for a new bucket and again once every taken token has refilled") {
  const auto p = rc::bucket_params::from(5, 1s, std::nullopt);
  rc::token_bucket bucket;
  CHECK(bucket.is_full(at(0ms), p));
  reserve_n(bucket, p, at(0ms), 7);
  CHECK_FALSE(bucket.is_full(at(0ms), p));
  CHECK_FALSE(bucket.is_full(at(1399ms), p));
  CHECK(bucket.is_full(at(1400ms), p));
  CHECK(bucket.is_full(at(9000ms), p));
}

TEST_CASE("a rate of 0.5 per second with burst 0.5 still admits the first call at once") {
  const auto p = rc::bucket_params::from(0.5, 1s, 0.5);
  rc::token_bucket delayed;
  CHECK(reserve_n(delayed, p, at(0ms), 3) == ms({0, 2000, 4000}));

  rc::token_bucket rejecting;
  CHECK(rejecting.try_acquire(at(0ms), p).admitted);
  CHECK(rejecting.try_acquire(at(500ms), p).retry_after == 1500ms);
}

TEST_CASE("delay waits are capped at the longest timer wait but reject retry_after is not") {
  const auto per_day = rc::bucket_params::from(1, 24h, std::nullopt);
  rc::token_bucket bucket;
  const auto waits = reserve_n(bucket, per_day, at(0ms), 30);
  CHECK(waits[24] == 24 * one_day);
  CHECK(waits[25] == rc::max_timer_wait);
  CHECK(waits[29] == rc::max_timer_wait);

  const auto per_hundred_days = rc::bucket_params::from(0.01, 24h, std::nullopt);
  rc::token_bucket rejecting;
  REQUIRE(rejecting.try_acquire(at(0ms), per_hundred_days).admitted);
  CHECK(rejecting.try_acquire(at(0ms), per_hundred_days).retry_after == 100 * one_day);
}

TEST_CASE("rounding in a fractional interval does not cost a nanosecond at whole-number waits") {
  const auto p = rc::bucket_params::from(3, 1s, std::nullopt);  // 333'333'333.33 ns per token
  for (const rc::duration start : {rc::duration(0), rc::duration(1h), rc::duration(7h + 1ns)}) {
    rc::token_bucket bucket;
    const auto waits = reserve_n(bucket, p, at(start), 9);
    CHECK(waits[3] == 333'333'334ns);
    CHECK(waits[4] == 666'666'667ns);
    CHECK(waits[5] == 1s);
    CHECK(waits[8] == 2s);
  }

  // Five reserved from a burst of three: the bucket holds exactly one token again at 1 s.
  rc::token_bucket bucket;
  reserve_n(bucket, p, at(0ms), 5);
  CHECK(bucket.try_acquire(at(999'999'999ns), p).retry_after == 1ns);
  CHECK(bucket.try_acquire(at(1s), p).admitted);
}

TEST_CASE("a long paced run at a fractional interval stays within 1 us of the exact schedule") {
  const auto p = rc::bucket_params::from(3, 1s, std::nullopt);
  rc::token_bucket bucket;
  rc::duration previous = -1ns;
  std::int64_t worst_error_ns = 0;
  for (std::int64_t i = 0; i < 100'000; ++i) {
    const rc::duration wait = bucket.reserve(at(1h), p);
    if (i >= 3) REQUIRE(wait > previous);  // the first three fit in the burst
    previous = wait;
    // Exact schedule: arrival i waits ceil((i - 2) * 1e9 / 3) ns.
    const std::int64_t exact = i < 3 ? 0 : ((i - 2) * 1'000'000'000 + 2) / 3;
    worst_error_ns = std::max(worst_error_ns, std::abs(wait.count() - exact));
  }
  CHECK(worst_error_ns <= 1000);
}

// ---- the waiting queue: enqueue and admit_head (throttle delay mode) -------------------------

TEST_CASE("enqueue hands a ticket one interval after the last, even when the bucket has refilled") {
  const auto p = rc::bucket_params::from(1000, 1s, 1);
  rc::token_bucket bucket;
  CHECK(bucket.reserve(at(0ms), p) == 0ns);
  CHECK(bucket.reserve(at(0ms), p) == 1ms);  // the first waiter's ticket: 1 ms
  // 5 ms later the first waiter has not run yet (a stall): refill alone would admit a newcomer at
  // once, ahead of it. Behind a waiter the newcomer takes ticket 2 ms instead, already due.
  CHECK(bucket.peek_wait(at(5ms), p) == 0ns);
  CHECK(bucket.peek_enqueue(at(5ms), p) == 0ns);
  CHECK(bucket.enqueue(at(5ms), p) == 0ns);
  CHECK(bucket.enqueue(at(0ms), p) == 3ms);
  CHECK(bucket.tokens(at(0ms), p) == Approx(-3));
}

TEST_CASE("head_wait is the wait for the earliest of the queued tickets") {
  const auto p = rc::bucket_params::from(10, 1s, 1);
  rc::token_bucket bucket;
  bucket.reserve(at(0ms), p);
  bucket.reserve(at(0ms), p);
  bucket.enqueue(at(0ms), p);
  bucket.enqueue(at(0ms), p);  // three queued tickets: 100, 200, 300 ms
  CHECK(bucket.head_wait(at(40ms), 3, p) == 60ms);
  CHECK(bucket.admit_head(at(100ms), 3, p) == 0);
  CHECK(bucket.head_wait(at(150ms), 2, p) == 50ms);
  // A waiter leaves (its client went away): its ticket goes back, the others move up one.
  bucket.give_back(at(150ms), p);
  CHECK(bucket.head_wait(at(150ms), 1, p) == 50ms);
  CHECK(bucket.peek_enqueue(at(150ms), p) == 150ms);
}

TEST_CASE("a head admitted less than an interval late moves nothing") {
  const auto p = rc::bucket_params::from(10, 1s, 1);
  rc::token_bucket bucket;
  bucket.reserve(at(0ms), p);
  bucket.reserve(at(0ms), p);
  bucket.enqueue(at(0ms), p);  // tickets 100 and 200 ms
  CHECK(bucket.admit_head(at(199ms), 2, p) == 0);
  CHECK(bucket.head_wait(at(199ms), 1, p) == 1ms);
}

TEST_CASE("a head admitted a whole interval or more late moves the queue by the whole intervals lost") {
  const auto p = rc::bucket_params::from(1000, 1s, 1);
  rc::token_bucket bucket;
  for (int i = 0; i < 6; ++i) bucket.reserve(at(0ms), p);  // tickets 0 .. 5 ms, five queued
  // The process stalls until 4.3 ms: the head (1 ms) goes 3.3 intervals late. The queue moves
  // 3 ms, so the four left go at 5, 6, 7 and 8 ms, not at once, and a newcomer gets 9 ms.
  CHECK(bucket.admit_head(at(4300us), 5, p) == 3);
  CHECK(bucket.head_wait(at(4300us), 4, p) == 700us);
  CHECK(bucket.peek_enqueue(at(4300us), p) == 4700us);
  // Exactly one interval late counts as one interval lost.
  CHECK(bucket.admit_head(at(6ms), 4, p) == 1);
  CHECK(bucket.head_wait(at(6ms), 3, p) == 1ms);
}

}  // namespace token_bucket_test
