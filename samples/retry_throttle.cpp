// retry_throttle: where a retry sits relative to a throttle decides what a retry costs.
//
// Four orders go to a downstream call that fails once per order, then succeeds. The same route
// is built three ways, each with a throttle of 2/s (burst 1) and a retry (3 attempts, 100 ms):
//
//   route scope   .throttle().retry().from(...)   the chain is fixed: throttle outside retry,
//                                                 so an order takes one token however many
//                                                 attempts it needs
//   step scope    .throttle().retry().call()      step wrappers fold outside-in in declaration
//                                                 order: throttle(retry(call)), one token
//   step scope    .retry().throttle().call()      retry(throttle(call)): every attempt goes
//                                                 through the throttle again and takes a token
//
// Virtual time: instant and exact.
#include <map>
#include <memory>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;

namespace {

const std::vector<int> orders = {1, 2, 3, 4};
const rc::throttle_options two_per_second = {.rate = 2, .burst = 1};
const rc::retry_options three_attempts = {.max_attempts = 3, .backoff = 100ms};

/// The downstream call: fails the first attempt for each order, then returns the order.
struct downstream {
  std::shared_ptr<std::map<int, int>> attempts = std::make_shared<std::map<int, int>>();

  int operator()(int order) const {
    if (++(*attempts)[order] == 1) throw std::runtime_error("503 Service Unavailable");
    return order;
  }
  int total() const {
    int n = 0;
    for (const auto& [order, count] : *attempts) n += count;
    return n;
  }
};

}  // namespace

int main() {
  rc::context ctx(rc::virtual_time);
  downstream route_call, throttle_retry_call, retry_throttle_call;
  rc::spy<int> route_out, throttle_retry_out, retry_throttle_out;

  ctx.add(rc::craft()
              .id("route scope")
              .throttle(two_per_second)  // before from(): route scope
              .retry(three_attempts)
              .from(rc::simple(orders))
              .transform(route_call)
              .to(route_out));

  ctx.add(rc::craft()
              .id(".throttle().retry()")
              .from(rc::simple(orders))
              .throttle(two_per_second)  // after from(): both wrap the transform below
              .retry(three_attempts)
              .transform(throttle_retry_call)
              .to(throttle_retry_out));

  ctx.add(rc::craft()
              .id(".retry().throttle()")
              .from(rc::simple(orders))
              .retry(three_attempts)
              .throttle(two_per_second)
              .transform(retry_throttle_call)
              .to(retry_throttle_out));

  std::map<std::string, int> passed;
  auto sub = ctx.on("route:throttle:passed", [&](const rc::event& e) { ++passed[e.details.at("routeId")]; });

  ctx.start();
  ctx.drain();
  ctx.stop();

  fmt::print("retry_throttle: 4 orders, each failing once downstream; throttle 2/s burst 1, retry 3 x 100 ms\n\n");
  fmt::print("  {:<22} {:>9} {:>17} {:>10} {:>15}\n", "route", "attempts", "throttle:passed", "delivered",
             "last delivery");
  struct row {
    const char* route;
    const downstream& call;
    const rc::spy<int>& out;
  };
  for (const row& r :
       {row{"route scope", route_call, route_out}, row{".throttle().retry()", throttle_retry_call, throttle_retry_out},
        row{".retry().throttle()", retry_throttle_call, retry_throttle_out}}) {
    const auto times = r.out.times();
    fmt::print("  {:<22} {:>9} {:>17} {:>10} {:>12} ms\n", r.route, r.call.total(), passed[r.route], r.out.count(),
               times.empty() ? 0.0 : rc::to_ms(times.back()));
  }
  fmt::print(
      "\nresult: route scope {} passed for {} attempts, .throttle().retry() {} passed for {} attempts, "
      ".retry().throttle() {} passed for {} attempts\n",
      passed["route scope"], route_call.total(), passed[".throttle().retry()"], throttle_retry_call.total(),
      passed[".retry().throttle()"], retry_throttle_call.total());
  const bool as_documented =
      passed["route scope"] == 4 && passed[".throttle().retry()"] == 4 && passed[".retry().throttle()"] == 8;
  return as_documented ? 0 : 1;
}
