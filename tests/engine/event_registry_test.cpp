// Component events: a name registered at run time is addressable like the engine's own.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "rc/error.hpp"
#include "rc/events.hpp"

namespace event_registry_test {

TEST_CASE("a registered component event gets one id past the table, found by name and subscribable") {
  const rc::event_id id = rc::register_event("plugin:test:thing-happened");
  CHECK(static_cast<std::size_t>(id) >= rc::builtin_event_count);
  CHECK(static_cast<std::size_t>(id) < rc::event_count);
  CHECK(rc::register_event("plugin:test:thing-happened") == id);  // idempotent
  CHECK(rc::find_event("plugin:test:thing-happened") == id);
  CHECK(rc::event_name(id) == "plugin:test:thing-happened");
  CHECK(rc::register_event("route:throttle:passed") == rc::event_id::throttle_passed);

  rc::event_bus bus(
      "ctx", [] { return rc::time_point{}; }, [](rc::time_point) { return std::string("ts"); });
  CHECK_FALSE(bus.listening(id));
  std::vector<std::string> seen;
  auto sub = bus.on("plugin:test:thing-happened",
                    [&](const rc::event& e) { seen.push_back(std::string(e.name) + " " + e.details["n"].dump()); });
  CHECK(bus.listening(id));
  bus.emit(id, [] { return nlohmann::json{{"n", 1}}; });
  bus.emit(rc::event_id::throttle_passed, [] { return nlohmann::json{{"n", 2}}; });  // not subscribed
  CHECK(seen == std::vector<std::string>{"plugin:test:thing-happened 1"});
}

TEST_CASE("an unregistered name stays RC2001 and a pattern cannot be registered") {
  rc::event_bus bus(
      "ctx", [] { return rc::time_point{}; }, [](rc::time_point) { return std::string("ts"); });
  CHECK_THROWS_AS(bus.on("plugin:test:never-registered", [](const rc::event&) {}), rc::error);
  CHECK_THROWS_AS(rc::register_event("plugin:*"), rc::error);
  CHECK_THROWS_AS(rc::register_event(""), rc::error);
}

}  // namespace event_registry_test
