// Must NOT compile: a step before from() has no body to work on.
#include <rc/rc.hpp>

int main() {
  auto route = rc::craft().id("early").transform([](int x) { return x + 1; });
  (void)route;
}
