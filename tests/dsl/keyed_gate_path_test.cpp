// A keyed gate around a synchronous step takes its pass on the synchronous path when it need not
// wait, and goes on asynchronously with the key it selected when it must: the key selector (a
// user callback) runs once per exchange either way, and pacing per key is unchanged.
#include <catch2/catch.hpp>
#include <rc/rc.hpp>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"

namespace keyed_gate_path_test {

using namespace std::chrono_literals;
using rc::test::in_ms;

TEST_CASE("a keyed throttle calls its key selector once per exchange, paced or not") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> out;
  int selector_calls = 0;
  // Two keys, rate 5/s burst 1: each key's first passes at once, the rest every 200 ms.
  ctx.add(rc::craft()
              .id("keyed")
              .from(rc::simple(std::vector<int>{0, 1, 2, 3, 4, 5}))
              .throttle({.rate = 5,
                         .burst = 1,
                         .key =
                             [&selector_calls](const rc::exchange& ex) {
                               ++selector_calls;
                               return std::string(ex.body<int>() % 2 == 0 ? "even" : "odd");
                             }})
              .transform([](int v) { return v; })
              .to(out));
  ctx.start();
  ctx.drain();
  CHECK(selector_calls == 6);
  CHECK(out.bodies() == std::vector<int>{0, 1, 2, 3, 4, 5});
  CHECK(in_ms(out.times()) == std::vector<double>{0, 0, 200, 200, 400, 400});
}

}  // namespace keyed_gate_path_test
