// Must NOT compile: after aggregate() the body is std::vector<int>, not the element type int.
#include <rc/rc.hpp>
#include <vector>

int main() {
  auto route = rc::craft()
                   .id("typed")
                   .from(rc::simple(std::vector<std::vector<int>>{{1, 2}}))
                   .split()
                   .aggregate()
                   .transform([](int x) { return x + 1; });
  (void)route;
}
