// Must NOT compile: a choice has at most one otherwise().
#include <rc/rc.hpp>

int main() {
  auto route = rc::craft()
                   .id("typed")
                   .from(rc::simple(1))
                   .choice(rc::otherwise(rc::branch<int>()), rc::otherwise(rc::branch<int>()));
  (void)route;
}
