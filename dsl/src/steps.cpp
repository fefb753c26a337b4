#include "rc/steps.hpp"

#include "rc/route.hpp"

namespace rc {

outcome tap_step::run_now(exchange& ex, route_runtime& rt) {
  auto copy = std::make_shared<exchange>(ex.clone());
  copy->set_operation("tap");
  context& ctx = rt.ctx();
  ctx.work_started();
  ctx.post([d = d_, copy, &rt, &ctx] {
    auto report = [&](std::exception_ptr e) {
      const error err = to_error(e);
      rt.events().emit(event_id::step_error, [&] {
        return nlohmann::json{{"routeId", rt.id()},
                              {"error", {{"code", err.code_string()}, {"message", err.message()}}},
                              {"operation", "tap"},
                              {"exchange", copy->to_json()}};
      });
    };
    if (d->synchronous()) {
      try {
        d->send_now(*copy, rt);
      } catch (...) {
        report(std::current_exception());
      }
      ctx.work_finished();
      return;
    }
    rc::spawn(rt.frames(), [d, copy, &rt, &ctx, report]() -> task<void> {
      try {
        co_await d->send(*copy, rt);
      } catch (...) {
        report(std::current_exception());
      }
      ctx.work_finished();
    });
  });
  return outcome::proceed();
}

}  // namespace rc
