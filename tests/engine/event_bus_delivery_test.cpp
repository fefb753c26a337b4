// The event bus's subscriber lists change while events are delivered, on one thread and on
// several: a running delivery finishes with the handlers it started with, later deliveries see
// the change, and a handler's last copy is destroyed once no delivery can still call it (neither
// early, which the sanitizers would catch as a use after free, nor never).
#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "rc/events.hpp"

namespace event_bus_delivery_test {

namespace {

rc::event_id ping_id() {
  static const rc::event_id id = rc::register_event("test:delivery:ping");
  return id;
}

struct bus_fixture {
  rc::event_id id = ping_id();  // registered before anyone subscribes by name
  rc::event_bus bus{"ctx-delivery", [] { return rc::time_point{}; }, [](rc::time_point) { return std::string(); }};
  void ping() {
    bus.emit(id, [] { return nlohmann::json::object(); });
  }
};

// Held by a handler: counts the handlers alive, and a call into a destroyed one reads `magic` wrong.
struct probe {
  static constexpr std::uint64_t alive_magic = 0x5eed5eed5eed5eedULL;
  std::atomic<int>& alive;
  std::uint64_t magic = alive_magic;
  explicit probe(std::atomic<int>& a) : alive(a) { alive.fetch_add(1); }
  ~probe() {
    magic = 0;
    alive.fetch_sub(1);
  }
};

}  // namespace

TEST_CASE("a handler unsubscribing itself mid-delivery: the delivery finishes, the next sees the change") {
  bus_fixture f;
  std::atomic<int> alive{0};
  std::vector<std::string> calls;
  rc::subscription second;
  rc::subscription first;
  auto p = std::make_shared<probe>(alive);
  first = f.bus.on("test:delivery:ping", [&, p](const rc::event&) {
    calls.push_back("first");
    first.unsubscribe();  // this handler's list is retired while the handler runs
    second = f.bus.on("test:delivery:ping", [&](const rc::event&) { calls.push_back("second"); });
    REQUIRE(p->magic == probe::alive_magic);  // still alive: the delivery holds the old list
    calls.push_back("first, after");
  });
  auto later = f.bus.on("test:delivery:ping", [&](const rc::event&) { calls.push_back("later"); });
  p.reset();
  REQUIRE(alive.load() == 1);

  f.ping();
  // The running delivery kept its list: "later" ran, "second" (added during it) did not.
  CHECK(calls == std::vector<std::string>{"first", "first, after", "later"});
  // Once the delivery ended, the retired list went, and with it the first handler.
  CHECK(alive.load() == 0);

  calls.clear();
  f.ping();
  CHECK(calls == std::vector<std::string>{"later", "second"});
}

TEST_CASE("a nested delivery does not free the lists the outer delivery is reading") {
  bus_fixture f;
  std::atomic<int> alive{0};
  int outer_calls = 0;
  int inner_calls = 0;
  rc::subscription inner;
  auto p = std::make_shared<probe>(alive);
  rc::subscription outer = f.bus.on("route:exchange:started", [&, p](const rc::event&) {
    ++outer_calls;
    // The inner delivery runs and ends inside this one; unsubscribing here must not free the
    // list this delivery still walks.
    outer.unsubscribe();
    f.ping();
    REQUIRE(p->magic == probe::alive_magic);
  });
  inner = f.bus.on("test:delivery:ping", [&](const rc::event&) { ++inner_calls; });
  p.reset();
  f.bus.emit(rc::event_id::exchange_started, [] { return nlohmann::json::object(); });
  CHECK(outer_calls == 1);
  CHECK(inner_calls == 1);
  CHECK(alive.load() == 0);
}

TEST_CASE("two threads deliver while a third subscribes and unsubscribes: every event arrives, no handler lingers") {
  bus_fixture f;
  std::atomic<int> alive{0};
  std::atomic<long> steady_calls{0};
  std::atomic<long> bad_calls{0};
  auto steady = f.bus.on("test:delivery:ping", [&](const rc::event&) { steady_calls.fetch_add(1); });

  constexpr int per_thread = 20'000;
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    std::vector<rc::subscription> held;
    for (int i = 0; !stop.load(); ++i) {
      auto p = std::make_shared<probe>(alive);
      held.push_back(f.bus.on("test:delivery:ping", [p, &bad_calls](const rc::event&) {
        if (p->magic != probe::alive_magic) bad_calls.fetch_add(1);
      }));
      if (held.size() > 4) held.erase(held.begin());  // an unsubscribe for every subscribe
      if (i % 64 == 0) std::this_thread::yield();
    }
  });
  auto emitter = [&] {
    for (int i = 0; i < per_thread; ++i) f.ping();
  };
  std::thread a(emitter), b(emitter);
  a.join();
  b.join();
  stop.store(true);
  churn.join();  // its subscriptions are gone with it

  CHECK(steady_calls.load() == 2L * per_thread);
  CHECK(bad_calls.load() == 0);
  // Lists retired while the emitters were inside a delivery wait for the next delivery to leave.
  f.ping();
  CHECK(alive.load() == 0);
}

TEST_CASE("threads that delivered and ended do not hold back the freeing of a retired handler") {
  bus_fixture f;
  std::atomic<int> alive{0};
  std::atomic<int> calls{0};
  for (int round = 0; round < 50; ++round) {
    std::thread t([&] { f.ping(); });
    t.join();
  }
  auto p = std::make_shared<probe>(alive);
  auto sub = f.bus.on("test:delivery:ping", [p, &calls](const rc::event&) { calls.fetch_add(1); });
  p.reset();
  std::thread([&] { f.ping(); }).join();
  CHECK(calls.load() == 1);
  REQUIRE(alive.load() == 1);
  sub.unsubscribe();  // no delivery is running anywhere: the handler goes at once
  CHECK(alive.load() == 0);
}

TEST_CASE("a handler unsubscribed while another thread is inside a delivery goes when that delivery ends") {
  bus_fixture f;
  std::atomic<int> alive{0};
  std::promise<void> entered, release;
  auto release_f = release.get_future().share();
  std::atomic<int> late_calls{0};
  std::atomic<bool> first{true};
  auto blocker = f.bus.on("test:delivery:ping", [&, release_f](const rc::event&) {
    if (first.exchange(false)) {
      entered.set_value();
      release_f.wait();
    }
  });
  auto p = std::make_shared<probe>(alive);
  auto late = f.bus.on("test:delivery:ping", [p, &late_calls](const rc::event&) {
    if (p->magic == probe::alive_magic) late_calls.fetch_add(1);
  });
  p.reset();
  std::thread t([&] { f.ping(); });
  entered.get_future().wait();
  late.unsubscribe();
  // The other thread's delivery walks the list that still holds the handler.
  CHECK(alive.load() == 1);
  release.set_value();
  t.join();
  CHECK(late_calls.load() == 1);  // that delivery still called it, alive
  CHECK(alive.load() == 0);       // and freed it as it left
}

}  // namespace event_bus_delivery_test
