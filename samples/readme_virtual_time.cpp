// samples/readme_virtual_time.cpp: built and run by ctest, which also checks that README.md shows it verbatim.
#include <rc/rc.hpp>
#include <vector>

using namespace std::chrono_literals;

int main() {
  rc::context ctx(rc::virtual_time);  // a manual clock: nothing waits for real
  rc::spy<int> out;                   // records each body and the (virtual) time it arrived

  ctx.add(rc::craft()
              .id("paced")
              .from(rc::simple(std::vector<int>(25, 0)))  // 25 exchanges at once
              .throttle({.rate = 10, .burst = 10})
              .to(out));
  ctx.start();
  ctx.drain();  // runs everything, jumping the clock from one wait to the next
  ctx.stop();

  std::vector<rc::duration> expected;  // ten at once (the burst), then one every 100 ms
  for (int i = 0; i < 25; ++i) expected.push_back(i < 10 ? 0ms : (i - 9) * 100ms);
  if (out.times() != expected) {
    fmt::print("unexpected arrival times\n");
    return 1;
  }
  fmt::print("ok: 10 at 0 ms, then one every 100 ms (last at {} ms)\n", rc::to_ms(out.times().back()));
}
