// Must NOT compile: one branch ends in std::string, the other in int; the route cannot go on after
// the choice with both.
#include <rc/rc.hpp>
#include <string>

int main() {
  auto route = rc::craft()
                   .id("typed")
                   .from(rc::simple(1))
                   .choice(rc::when([](const int& x) { return x > 0; },
                                    rc::branch<int>().transform([](int x) { return std::to_string(x); })),
                           rc::otherwise(rc::branch<int>()));
  (void)route;
}
