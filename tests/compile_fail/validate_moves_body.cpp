// Must NOT compile: a validator must not move from the body (an error handler sees the record that failed).
#include <rc/rc.hpp>
#include <string>

int main() {
  auto route =
      rc::craft().id("validate").from(rc::simple(std::string("x"))).validate([](std::string&& s) { return s; });
  (void)route;
}
