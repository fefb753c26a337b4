// Must NOT compile: an endpoint's reply type is not known to the builder, enrich<Reply>(endpoint) names it.
#include <rc/rc.hpp>

int main() {
  auto route = rc::craft().id("enrich").from(rc::simple(1)).enrich(rc::direct<int>("lookup"));
  (void)route;
}
