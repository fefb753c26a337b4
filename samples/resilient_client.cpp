// resilient_client: a client route in front of a flaky downstream, with the whole resilience
// chain in route scope, and what happened to each order.
//
//   error(dead letters)            a failure that gets through everything below is parked
//   circuit_breaker(3 failures)    three failed orders in 5 s open it for 1 s
//   retry(2 attempts, 50 ms)       one more try for a retryable failure
//   timeout(200 ms)                a deadline per attempt; a hung call is cancelled
//   concurrency(2)                 at most two calls in flight, the rest queue
//
// Whatever order the builder calls come in, the route runs them in that fixed order (see README,
// "The route-scope chain"). Twenty-four orders arrive 100 ms apart. The downstream answers in
// 120 ms, but it fails (503) between 0.4 s and 0.8 s and hangs between 2.0 s and 2.3 s. What the
// output shows: three failed orders (each after its retry: an exhausted retry counts once) open
// the breaker, which refuses the next ones at once until a probe after the cooldown closes it;
// hung calls are cancelled at their deadline and retried; nothing is lost, every failure ends in
// the dead-letter route with its error code.
//
// Virtual time: instant and exact.
#include <fmt/ranges.h>

#include <map>
#include <memory>
#include <mutex>
#include <rc/rc.hpp>
#include <string>
#include <vector>

using namespace std::chrono_literals;

namespace {

/// What the downstream did with each call, per order.
struct call_log {
  std::mutex mutex;
  std::map<std::string, std::vector<std::string>> calls;
  void add(const std::string& order, std::string what) {
    std::lock_guard lock(mutex);
    calls[order].push_back(std::move(what));
  }
};

/// The downstream, standing in for an HTTP service: its behaviour depends on when it is called.
class flaky_inventory final : public rc::step {
 public:
  explicit flaky_inventory(std::shared_ptr<call_log> log) : log_(std::move(log)) {}
  std::string_view operation() const override { return "to"; }
  std::string_view label() const override { return "inventory"; }

  rc::task<rc::outcome> run(rc::exchange& ex, rc::route_runtime& rt) override {
    const std::string order = ex.body<std::string>();
    const double at = rc::to_ms(rt.now().time_since_epoch());
    const bool down = at >= 400 && at < 800;
    const bool hung = at >= 2000 && at < 2300;
    const rc::duration takes = down ? 20ms : hung ? 10s : 120ms;
    // The call listens to the exchange's abort signal: a timeout around it cuts it short.
    const auto r = co_await rt.clock().wait_until(rt.now() + takes, &rt.intake(), ex.abort_signal());
    if (r == rc::wait_result::cancelled) {
      log_->add(order, fmt::format("{:.0f}: cancelled", at));
      throw rc::error(rc::errc::connection_failed, "call cancelled");
    }
    if (down) {
      log_->add(order, fmt::format("{:.0f}: 503", at));
      throw rc::error(rc::errc::step_failed, "inventory: HTTP 503 Service Unavailable");
    }
    log_->add(order, fmt::format("{:.0f}: ok", at));
    ex.body<std::string>() += " reserved";
    co_return rc::outcome::proceed();
  }

 private:
  std::shared_ptr<call_log> log_;
};

}  // namespace

int main() {
  rc::context ctx(rc::virtual_time);
  auto log = std::make_shared<call_log>();
  rc::spy<std::string> delivered, parked;

  // The dead-letter route: keeps what could not be delivered, with the reason in its headers.
  ctx.add(rc::craft().id("dead-letters").from(rc::direct<std::string>("dead-letters")).to(parked));

  ctx.add(rc::craft()
              .id("client")
              .error([](const rc::error&, rc::exchange&) {
                return rc::recovery::forward(rc::direct<std::string>("dead-letters"));
              })
              .circuit_breaker({.failure_threshold = 3, .window = 5s, .cooldown = 1s})
              .retry({.max_attempts = 2, .backoff = 50ms})
              .timeout(200ms)
              .concurrency({.max = 2})
              .from(rc::direct<std::string>("client"))
              .use(std::make_unique<flaky_inventory>(log))
              .to(delivered));

  // The orders: twelve, 100 ms apart, each handed to the client route without waiting for it.
  ctx.add(rc::craft()
              .id("orders")
              .from(rc::timer({.interval = 100ms, .count = 24, .fixed_rate = true}))
              .transform([](rc::tick t) { return fmt::format("order-{:02}", t.counter); })
              .tap(rc::direct<std::string>("client")));

  std::vector<std::string> breaker;
  auto on_breaker = [&](const rc::event& e) {
    breaker.push_back(fmt::format("{:.0f} ms {}", rc::to_ms(e.at.time_since_epoch()), e.name.substr(21)));
  };
  auto opened = ctx.on("route:circuitBreaker:opened", on_breaker);
  auto half_open = ctx.on("route:circuitBreaker:halfOpen", on_breaker);
  auto closed = ctx.on("route:circuitBreaker:closed", on_breaker);

  ctx.start();
  ctx.drain();
  ctx.stop();

  std::map<std::string, std::string> outcome;
  for (const auto& r : delivered.received())
    outcome[r.body.substr(0, 8)] = fmt::format("delivered at {:.0f} ms", rc::to_ms(r.at.time_since_epoch()));
  for (const auto& r : parked.received()) {
    const auto* code = r.headers.find("routecraft.error.code");
    outcome[r.body.substr(0, 8)] = fmt::format("dead letter at {:.0f} ms ({})", rc::to_ms(r.at.time_since_epoch()),
                                               code ? code->get<std::string>() : "?");
  }

  fmt::print("resilient_client: 24 orders 100 ms apart; downstream fails 0.4-0.8 s, hangs 2.0-2.3 s\n\n");
  fmt::print("  {:<9} {:<34} {}\n", "order", "downstream calls (start ms: result)", "what happened");
  int calls = 0;
  for (int n = 1; n <= 24; ++n) {
    const std::string order = fmt::format("order-{:02}", n);
    const auto& c = log->calls[order];
    calls += static_cast<int>(c.size());
    fmt::print("  {:<9} {:<34} {}\n", order,
               c.empty() ? std::string("none (breaker open)") : fmt::format("{}", fmt::join(c, ", ")),
               outcome.count(order) ? outcome[order] : "lost");
  }
  fmt::print("\n  breaker: {}\n", fmt::join(breaker, ", "));
  const auto lost = 24 - static_cast<int>(delivered.count() + parked.count());
  fmt::print("\nresult: {} delivered, {} dead letters, {} lost, {} downstream calls\n", delivered.count(),
             parked.count(), lost, calls);
  return lost == 0 ? 0 : 1;
}
