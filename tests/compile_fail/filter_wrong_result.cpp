// Must NOT compile: a filter predicate returns bool, rc::keep()/rc::drop(reason) or an optional reason.
#include <rc/rc.hpp>
#include <string>

int main() {
  auto route = rc::craft().id("filter").from(rc::simple(1)).filter([](const int& v) { return std::to_string(v); });
  (void)route;
}
