// Must NOT compile: the branch starts on std::string but the body at choice() is int.
#include <rc/rc.hpp>
#include <string>

int main() {
  auto route = rc::craft().id("typed").from(rc::simple(1)).choice(rc::otherwise(rc::branch<std::string>()));
  (void)route;
}
