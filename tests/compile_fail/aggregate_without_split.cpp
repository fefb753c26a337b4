// Must NOT compile: aggregate() with no split() before it.
#include <rc/rc.hpp>
#include <vector>

int main() {
  auto route = rc::craft().id("typed").from(rc::simple(std::vector<int>{1, 2})).aggregate();
  (void)route;
}
