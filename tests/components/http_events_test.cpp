// The HTTP component's event is registered by the component, not the engine's table, and stays
// addressable by name.
#include <catch2/catch.hpp>
#include <rc/rc.hpp>

namespace http_events_test {

TEST_CASE("plugin:http:request:completed is a component event users subscribe to by name") {
  CHECK(static_cast<std::size_t>(rc::http_request_completed) >= rc::builtin_event_count);
  CHECK(rc::find_event("plugin:http:request:completed") == rc::http_request_completed);
  CHECK(rc::event_name(rc::http_request_completed) == "plugin:http:request:completed");
  rc::context ctx(rc::virtual_time);
  auto sub = ctx.on("plugin:http:request:completed", [](const rc::event&) {});
  CHECK(sub.active());
  CHECK(ctx.events().listening(rc::http_request_completed));
}

}  // namespace http_events_test
