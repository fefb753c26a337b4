// direct<T>("name"): in-process, route to route.
//
// As a source (`from(rc::direct<order>("orders"))`) it registers the endpoint in its context
// (the last route registered under a name wins) and serves until the route stops. As a
// destination (`to(rc::direct<order>("orders"))`) it runs the caller's body (copied) and headers
// through the endpoint's route and waits for it: a failure there fails the caller with the same
// error; the body is unchanged. `request<Reply>(rc::direct<order>("orders"))` is request/reply:
// the endpoint route's final body (of type Reply) becomes the caller's body. No endpoint under
// the name: RC5004. It is also a forward target: `rc::recovery::forward(rc::direct<T>("dead"))`
// from an error handler sends the failed exchange there (a dead-letter route).
// And application code calls it: `co_await ctx.request<Reply>(rc::direct<T>("name"), body)`,
// `ctx.send_sync(rc::direct<T>("name"), body)` (rc/call.hpp); a drop there is RC5031 too.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <typeindex>

#include "rc/call.hpp"
#include "rc/context.hpp"
#include "rc/endpoint.hpp"
#include "rc/recovery.hpp"

namespace rc {

/// Per-context registry of direct endpoints.
class direct_registry {
 public:
  explicit direct_registry(context&) {}
  struct entry {
    route_runtime* route;
    std::type_index body;
  };
  void bind(const std::string& name, route_runtime* rt, std::type_index body) {
    std::lock_guard lock(mutex_);
    endpoints_.insert_or_assign(name, entry{rt, body});
  }
  void unbind(const std::string& name, route_runtime* rt) {
    std::lock_guard lock(mutex_);
    auto it = endpoints_.find(name);
    if (it != endpoints_.end() && it->second.route == rt) endpoints_.erase(it);
  }
  std::optional<entry> find(const std::string& name) const {
    std::lock_guard lock(mutex_);
    auto it = endpoints_.find(name);
    if (it == endpoints_.end()) return std::nullopt;
    return it->second;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, entry, std::less<>> endpoints_;
};

template <class T>
class direct_endpoint final : public source<T>, public destination_base, public forward_target, public call_endpoint {
 public:
  explicit direct_endpoint(std::string name) : name_(std::move(name)) {}

  // source
  std::string_view adapter() const override { return "direct"; }
  bool finite() const noexcept override { return false; }
  task<void> run(source_context& sc) override {
    auto& reg = sc.route().ctx().template service<direct_registry>();
    reg.bind(name_, &sc.route(), std::type_index(typeid(T)));
    (void)co_await sc.sleep_until(time_point::max());  // serve until the route stops
    reg.unbind(name_, &sc.route());
  }

  // destination
  bool synchronous() const noexcept override { return false; }
  task<void> send(exchange& ex, route_runtime& rt) override { (void)co_await call(ex, rt); }

  // forward target (an error handler's recovery::forward): the failed exchange must still hold a T.
  std::string describe() const override { return "direct:" + name_; }
  task<exchange> forward(exchange& ex, route_runtime& rt) override {
    if (!ex.raw_body().template holds<T>())
      throw error(errc::misconfigured, "forward(): direct endpoint \"" + name_ +
                                           "\" takes another body type than the failed exchange holds");
    co_return co_await call(ex, rt);
  }

  /// Runs the endpoint's route on a copy of `ex`; returns the endpoint's final exchange.
  task<exchange> call(exchange& ex, route_runtime& rt) {
    exchange child;
    child.set_body(T(ex.body<T>()));
    for (const auto& [k, v] : ex.headers()) child.set_header(k, v);
    child.set_correlation_id(ex.correlation_id());
    if (ex.deadline()) child.set_deadline(*ex.deadline());
    child.set_abort_signal(ex.abort_signal());
    return invoke(rt.ctx(), std::move(child));
  }

  // call endpoint (ctx.send / ctx.request): `ex` is the caller's fresh exchange, run as it is.
  task<exchange> invoke(context& ctx, exchange ex) override {
    auto target = ctx.template service<direct_registry>().find(name_);
    if (!target) throw error(errc::no_direct_handler, "no route serves direct endpoint \"" + name_ + "\"");
    if (target->body != std::type_index(typeid(T)))
      throw error(errc::misconfigured, "direct endpoint \"" + name_ + "\" takes another body type");
    run_result r = co_await target->route->process(std::move(ex));
    if (r.result.is_fail()) std::rethrow_exception(r.result.error);
    if (r.result.is_drop())
      throw error(errc::dropped_no_reply,
                  "direct endpoint \"" + name_ + "\" dropped the exchange (" + r.result.reason + "): no reply");
    co_return std::move(r.ex);
  }

 private:
  std::string name_;
};

template <class T>
direct_endpoint<T> direct(std::string name) {
  return direct_endpoint<T>(std::move(name));
}

}  // namespace rc
