// Typed event details: built only when someone listens, rendered as JSON (and the timestamp as
// text) only when a handler reads them, once per event, and kept by a copy of the event.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "rc/events.hpp"

namespace typed_events_test {

namespace {

// A payload that counts how often it is rendered.
struct counted_details {
  int n = 0;
  int* renders = nullptr;
  void write_json(nlohmann::json& j) const {
    ++*renders;
    j["n"] = n;
  }
};

struct bus_fixture {
  int ts_renders = 0;
  rc::event_bus bus{"ctx-typed", [] { return rc::time_point{std::chrono::milliseconds(1500)}; },
                    [this](rc::time_point) {
                      ++ts_renders;
                      return std::string("1970-01-01T00:00:01.500Z");
                    }};
};

}  // namespace

TEST_CASE("a handler that reads neither details nor ts costs no rendering") {
  bus_fixture f;
  int renders = 0;
  int built = 0;
  int seen = 0;
  auto sub = f.bus.on("route:throttle:passed", [&](const rc::event& e) {
    ++seen;
    const auto* d = e.get<counted_details>();
    REQUIRE(d != nullptr);
    CHECK(d->n == 7);
  });
  f.bus.emit(rc::event_id::throttle_passed, [&] {
    ++built;
    return counted_details{7, &renders};
  });
  CHECK(seen == 1);
  CHECK(built == 1);
  CHECK(renders == 0);
  CHECK(f.ts_renders == 0);
  // Nobody listens: the payload is not even built.
  f.bus.emit(rc::event_id::throttle_delayed, [&] {
    ++built;
    return counted_details{8, &renders};
  });
  CHECK(built == 1);
}

TEST_CASE("details and ts are rendered once per event however many handlers read them") {
  bus_fixture f;
  int renders = 0;
  std::vector<std::string> seen;
  auto read = [&](const rc::event& e) { seen.push_back(e.details["n"].dump() + " " + e.ts.str()); };
  auto a = f.bus.on("route:throttle:passed", read);
  auto b = f.bus.on("*", read);
  f.bus.emit(rc::event_id::throttle_passed, [&] { return counted_details{3, &renders}; });
  CHECK(seen == std::vector<std::string>{"3 1970-01-01T00:00:01.500Z", "3 1970-01-01T00:00:01.500Z"});
  CHECK(renders == 1);
  CHECK(f.ts_renders == 1);
  CHECK(seen.size() == 2);
}

TEST_CASE("a copy of an event keeps its rendered details, ts and context id after delivery") {
  std::vector<rc::event> kept;
  int renders = 0;
  {
    bus_fixture f;
    auto sub = f.bus.on("route:throttle:passed", [&](const rc::event& e) { kept.push_back(e); });
    f.bus.emit(rc::event_id::throttle_passed, [&] { return counted_details{5, &renders}; });
    f.bus.emit(rc::event_id::throttle_passed, [] { return nlohmann::json{{"n", 6}}; });
  }  // the bus is gone: the copies own what they show
  REQUIRE(kept.size() == 2);
  CHECK(kept[0].get<counted_details>() == nullptr);  // the typed value lived during delivery only
  CHECK(kept[0].details["n"] == 5);
  CHECK(kept[1].details == nlohmann::json{{"n", 6}});
  CHECK(kept[0].ts == "1970-01-01T00:00:01.500Z");
  CHECK(kept[0].context_id == "ctx-typed");
  CHECK(kept[0].to_json() == nlohmann::json{{"ts", "1970-01-01T00:00:01.500Z"},
                                            {"contextId", "ctx-typed"},
                                            {"details", {{"n", 5}}},
                                            {"_event", "route:throttle:passed"}});
  CHECK(renders == 1);
}

TEST_CASE("a JSON payload reads as before and get of a typed value is null on it") {
  bus_fixture f;
  bool checked = false;
  auto sub = f.bus.on("route:throttle:passed", [&](const rc::event& e) {
    const nlohmann::json& d = e.details;
    CHECK(d.value("routeId", "") == "r");
    CHECK(e.details.value("missing", 4) == 4);
    CHECK(e.details.contains("routeId"));
    CHECK(e.details.find("nope") == e.details.end());
    CHECK(e.details().is_object());
    CHECK(e.get<counted_details>() == nullptr);
    checked = true;
  });
  f.bus.emit(rc::event_id::throttle_passed, [] { return nlohmann::json{{"routeId", "r"}}; });
  CHECK(checked);
}

TEST_CASE("a handler unsubscribing itself during delivery is not called again and others still are") {
  bus_fixture f;
  int first = 0;
  int second = 0;
  rc::subscription a;
  a = f.bus.on("route:throttle:passed", [&](const rc::event&) {
    ++first;
    a.unsubscribe();
  });
  auto b = f.bus.on("route:throttle:passed", [&](const rc::event&) { ++second; });
  for (int i = 0; i < 3; ++i) f.bus.emit(rc::event_id::throttle_passed, [] { return nlohmann::json::object(); });
  CHECK(first == 1);
  CHECK(second == 3);
}

}  // namespace typed_events_test
