// Built against the installed package: <rc/testing.hpp> and routecraft::testing are there, and a
// route runs under the test context.
#include <rc/rc.hpp>
#include <rc/testing.hpp>

using namespace std::chrono_literals;

int main() {
  rc::testing::test_context tc;
  rc::testing::mock<int> double_it;
  double_it.latency(10ms).reply([](const rc::exchange& ex) { return ex.body<int>() * 2; });
  rc::spy<int> out;
  tc.add(rc::craft().id("r").from(rc::simple(std::vector<int>{1, 2})).request<int>(double_it).to(out));
  tc.test();
  if (out.bodies() != std::vector<int>{2, 4} || tc.now() != rc::time_point{} + 10ms) return 1;
  fmt::print("ok\n");
}
