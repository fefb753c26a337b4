// samples/readme_example.cpp: built and run by ctest, which also checks that README.md shows it verbatim.
#include <rc/rc.hpp>
#include <string>
#include <vector>

using namespace std::chrono_literals;

struct order {
  std::string tenant;
  double amount;
};

int main() {
  rc::context ctx;  // real time, one worker thread

  ctx.add(rc::craft()
              .id("invoices")
              // Before from(): route scope. The throttle admits each exchange once; the retry
              // re-runs the steps below it when one fails.
              .throttle({.rate = 100, .per = rc::per::second})
              .retry({.max_attempts = 3, .backoff = 10ms, .factor = 2})
              .from(rc::simple(std::vector<order>{{"acme", 120.0}, {"globex", 80.5}, {"acme", 42.0}}))
              .header("tenant", [](const rc::exchange& ex) { return ex.body<order>().tenant; })
              .filter([](const order& o) { return o.amount >= 50; })  // drops the 42.0 order
              .transform([](order o) {                                // order -> std::string
                return fmt::format("invoice for {}: {:.2f}", o.tenant, o.amount * 1.2);
              })
              // After from(): step scope. Both wrap the next step, first declared outermost:
              // throttle(delay(to)).
              .throttle({.rate = 10,
                         .key = [](const rc::exchange& ex) { return ex.header_or("tenant", "anonymous"); },
                         .label = "per-tenant"})
              .delay(20ms)
              .to(rc::log()));

  auto sub = ctx.on("route:throttle:passed", [](const rc::event& e) {
    fmt::print("throttle passed: scope={} key={} waited={}\n", e.details.at("scope").get<std::string>(),
               e.details.value("key", "-"), e.details.at("waited").get<bool>());
  });

  ctx.start();
  ctx.drain();  // every exchange from the finite source has finished
  ctx.stop();
}
