#include <catch2/catch.hpp>
#include <rc/rc.hpp>

namespace smoke_test {

using namespace std::chrono_literals;

TEST_CASE("25 exchanges at once through rate 10/s burst 10: ten at 0 ms, then one every 100 ms") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  std::vector<int> values(25);
  for (int i = 0; i < 25; ++i) values[i] = i;
  ctx.add(rc::craft().id("paced").from(rc::simple(values)).throttle({.rate = 10, .burst = 10}).to(out));
  ctx.start();
  ctx.drain();
  auto times = out.times();
  REQUIRE(times.size() == 25);
  for (int i = 0; i < 10; ++i) CHECK(times[i] == 0ns);
  for (int i = 10; i < 25; ++i) CHECK(times[i] == std::chrono::milliseconds(100 * (i - 9)));
  ctx.stop();
}

}  // namespace smoke_test
