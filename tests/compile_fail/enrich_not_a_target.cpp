// Must NOT compile: enrich() needs an endpoint with call() or a callable taking the body.
#include <rc/rc.hpp>
#include <string>

int main() {
  auto route = rc::craft().id("enrich").from(rc::simple(1)).enrich(std::string("not a target"));
  (void)route;
}
