// The exchange's rarely used fields (correlation, principal, deadline, abort signal, limit notes,
// finish hooks) live in a block that a finished exchange hands on to the next one made on its
// thread: whatever the last owner left there, a new exchange starts with none of it.
#include "rc/exchange.hpp"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rc/clock.hpp"

namespace {

// Gives a block everything it can hold.
void fill(rc::exchange& ex, rc::cancel_signal& abort, int& hooks_run) {
  ex.set_correlation_id("corr-1");
  ex.set_principal({{"user", "ann"}});
  ex.set_deadline(rc::time_point{} + std::chrono::seconds(5));
  ex.set_abort_signal(&abort);
  ex.limit_notes().emplace_back().key = "k";
  ex.on_finish([&hooks_run](bool) { ++hooks_run; });
}

void check_fresh(rc::exchange& ex) {
  CHECK(ex.correlation_id() == ex.id());
  CHECK_FALSE(ex.principal().has_value());
  CHECK_FALSE(ex.deadline().has_value());
  CHECK(ex.abort_signal() == nullptr);
  CHECK(ex.limit_notes().empty());
}

}  // namespace

TEST_CASE("exchange: a new exchange starts clean even when it reuses a finished one's block") {
  rc::manual_clock clock;
  rc::cancel_signal abort(clock);
  int hooks_run = 0;
  // More exchanges than the thread keeps blocks for, finished in a different order than made.
  for (int round = 0; round < 3; ++round) {
    std::vector<std::unique_ptr<rc::exchange>> batch;
    for (int i = 0; i < 6; ++i) {
      auto ex = std::make_unique<rc::exchange>();
      check_fresh(*ex);
      ex->run_finish_hooks(true);  // none: a hook of an earlier owner must not run here
      fill(*ex, abort, hooks_run);
      batch.push_back(std::move(ex));
    }
    batch.erase(batch.begin() + 2);
    batch.clear();
  }
  CHECK(hooks_run == 0);

  rc::exchange ex;
  check_fresh(ex);
  fill(ex, abort, hooks_run);
  ex.run_finish_hooks(true);
  CHECK(hooks_run == 1);  // its own hook, once
}

TEST_CASE("exchange: a block made on one thread and released on another serves that thread cleanly") {
  rc::manual_clock clock;
  rc::cancel_signal abort(clock);
  int hooks_run = 0;
  auto made_here = std::make_unique<rc::exchange>();
  fill(*made_here, abort, hooks_run);
  std::thread([&made_here] {
    made_here.reset();  // into this thread's store; what is left there is freed when the thread ends
    rc::exchange there;
    check_fresh(there);
  }).join();
  rc::exchange here;
  check_fresh(here);
  CHECK(hooks_run == 0);
}

TEST_CASE("exchange: header_map::set_string sets a key's text in place, as set() would") {
  rc::header_map h;
  h.set_string("a", "first value, longer than any short string");
  h.set("b", 7);
  REQUIRE(h.size() == 2);
  const std::string* held = &h.find("a")->get_ref<const std::string&>();
  h.set_string("a", "second");
  CHECK(*h.find("a") == "second");
  CHECK(&h.find("a")->get_ref<const std::string&>() == held);  // the same string, given new text
  h.set_string("b", "now text");                               // a value of another type is replaced
  CHECK(*h.find("b") == "now text");
  h.set_string("c", "");
  CHECK(*h.find("c") == "");
  CHECK(h.to_json() == nlohmann::json{{"a", "second"}, {"b", "now text"}, {"c", ""}});
  CHECK(h.begin()->first == "a");  // insertion order kept
}
