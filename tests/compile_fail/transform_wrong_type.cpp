// Must NOT compile: the source yields int, the transform takes a std::string.
#include <rc/rc.hpp>
#include <string>

int main() {
  auto route = rc::craft().id("typed").from(rc::simple(std::vector<int>{1, 2})).transform([](const std::string& s) {
    return s.size();
  });
  (void)route;
}
