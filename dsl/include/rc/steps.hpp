// The typed steps the builder appends. Each is synchronous (no coroutine frame) unless it has to
// wait for something; the body cast is unchecked because the builder's types guarantee it.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "rc/context.hpp"
#include "rc/endpoint.hpp"
#include "rc/error.hpp"
#include "rc/step.hpp"

namespace rc {

/// Engine-owned header keys cannot be set with .header() (RC5003).
inline void check_header_key(const std::string& key) {
  if (key.rfind("routecraft.", 0) == 0)
    throw error(errc::misconfigured,
                fmt::format("header({{ key }}) must not be an engine key (routecraft.*), got \"{}\".", key));
  if (key.empty()) throw error(errc::misconfigured, "header({ key }) must be a non-empty string, got \"\".");
}

template <class In, class Out, class F>
class transform_step final : public step {
 public:
  explicit transform_step(F f) : f_(std::move(f)) {}
  std::string_view operation() const override { return "transform"; }
  bool synchronous() const noexcept override { return true; }
  outcome run_now(exchange& ex, route_runtime&) override {
    In& in = ex.body<In>();
    if constexpr (std::is_invocable_v<F&, In&&, exchange&>) {
      if constexpr (std::is_same_v<In, Out>)
        in = f_(std::move(in), ex);
      else
        ex.set_body(f_(std::move(in), ex));
    } else {
      if constexpr (std::is_same_v<In, Out>)
        in = f_(std::move(in));
      else
        ex.set_body(f_(std::move(in)));
    }
    return outcome::proceed();
  }

 private:
  F f_;
};

template <class F>
class process_step final : public step {
 public:
  explicit process_step(F f) : f_(std::move(f)) {}
  std::string_view operation() const override { return "process"; }
  bool synchronous() const noexcept override { return true; }
  outcome run_now(exchange& ex, route_runtime&) override {
    f_(ex);
    return outcome::proceed();
  }

 private:
  F f_;
};

// filter_step (bool, rc::keep()/rc::drop(reason), coroutine predicates): rc/operations.hpp.

template <class F>
class header_step final : public step {
 public:
  header_step(std::string key, F f) : key_(std::move(key)), f_(std::move(f)) {}
  std::string_view operation() const override { return "header"; }
  bool synchronous() const noexcept override { return true; }
  outcome run_now(exchange& ex, route_runtime&) override {
    ex.set_header(key_, nlohmann::json(f_(static_cast<const exchange&>(ex))));
    return outcome::proceed();
  }

 private:
  std::string key_;
  F f_;
};

/// What stands in for an endpoint in a test (rc::testing::mock): it plays both roles an endpoint
/// can have in a route, destination (`send`) and request/reply (`call`).
class endpoint_double {
 public:
  virtual ~endpoint_double() = default;
  virtual task<void> send(exchange& ex, route_runtime& rt) = 0;
  virtual task<exchange> call(exchange& ex, route_runtime& rt) = 0;
};

/// Implemented by the steps that hold an endpoint (to, tap, request). A test context asks each
/// one, once, when the route is added, whether its endpoint is one the test replaces, and swaps
/// the step for `with_double(...)`. Nothing of this runs per exchange: a route outside a test
/// context is built and run exactly as without it.
class endpoint_step {
 public:
  /// The endpoint's dynamic type, and a pointer to the most derived object (for a static_cast
  /// to that type).
  virtual const std::type_info& endpoint_type() const noexcept = 0;
  virtual const void* endpoint() const noexcept = 0;
  /// The same step talking to `d` instead; its events name the original adapter.
  virtual std::unique_ptr<step> with_double(std::shared_ptr<endpoint_double> d) const = 0;

 protected:
  ~endpoint_step() = default;
};

namespace detail {
/// An endpoint_double seen as a destination or a request endpoint, named as the one it replaces.
class double_endpoint final : public destination_base {
 public:
  double_endpoint(std::shared_ptr<endpoint_double> d, std::string adapter)
      : d_(std::move(d)), adapter_(std::move(adapter)) {}
  std::string_view adapter() const override { return adapter_; }
  bool synchronous() const noexcept override { return false; }
  task<void> send(exchange& ex, route_runtime& rt) override { return d_->send(ex, rt); }
  task<exchange> call(exchange& ex, route_runtime& rt) { return d_->call(ex, rt); }

 private:
  std::shared_ptr<endpoint_double> d_;
  std::string adapter_;
};
}  // namespace detail

/// .to(destination)
class to_step final : public step, public endpoint_step {
 public:
  explicit to_step(std::unique_ptr<destination_base> d) : d_(std::move(d)), sync_(d_->synchronous()) {}
  std::string_view operation() const override { return "to"; }
  std::string_view adapter() const override { return d_->adapter(); }
  bool synchronous() const noexcept override { return sync_; }
  outcome run_now(exchange& ex, route_runtime& rt) override {
    d_->send_now(ex, rt);
    return outcome::proceed();
  }
  task<outcome> run(exchange& ex, route_runtime& rt) override {
    co_await d_->send(ex, rt);
    co_return outcome::proceed();
  }
  const std::type_info& endpoint_type() const noexcept override { return typeid(*d_); }
  const void* endpoint() const noexcept override { return dynamic_cast<const void*>(d_.get()); }
  std::unique_ptr<step> with_double(std::shared_ptr<endpoint_double> d) const override {
    return std::make_unique<to_step>(std::make_unique<detail::double_endpoint>(std::move(d), std::string(adapter())));
  }

 private:
  std::unique_ptr<destination_base> d_;
  bool sync_;
};

/// .to(function): calls it with the body; a returned Body replaces the body.
template <class Body, class F>
class call_step final : public step {
 public:
  explicit call_step(F f) : f_(std::move(f)) {}
  std::string_view operation() const override { return "to"; }
  std::string_view adapter() const override { return "inline"; }
  bool synchronous() const noexcept override { return true; }
  outcome run_now(exchange& ex, route_runtime&) override {
    using R = std::invoke_result_t<F&, Body&>;
    if constexpr (std::is_same_v<std::decay_t<R>, Body>)
      ex.body<Body>() = f_(ex.body<Body>());
    else
      (void)f_(ex.body<Body>());
    return outcome::proceed();
  }

 private:
  F f_;
};

/// .request<Reply>(endpoint): the endpoint's reply body replaces the body.
template <class Reply, class D>
class request_step final : public step, public endpoint_step {
 public:
  explicit request_step(D d) : d_(std::move(d)) {}
  const std::type_info& endpoint_type() const noexcept override { return typeid(D); }
  const void* endpoint() const noexcept override { return &d_; }
  std::unique_ptr<step> with_double(std::shared_ptr<endpoint_double> d) const override {
    return std::make_unique<request_step<Reply, detail::double_endpoint>>(
        detail::double_endpoint(std::move(d), std::string(adapter())));
  }
  std::string_view operation() const override { return "request"; }
  std::string_view adapter() const override { return d_.adapter(); }
  task<outcome> run(exchange& ex, route_runtime& rt) override {
    exchange reply = co_await d_.call(ex, rt);
    if (!reply.raw_body().template holds<Reply>())
      throw error(errc::validation, fmt::format("request(): the reply body is not of the requested type"));
    ex.raw_body() = std::move(reply.raw_body());
    co_return outcome::proceed();
  }

 private:
  D d_;
};

/// .tap(destination): a detached copy; failures are reported, never reach the route.
class tap_step final : public step, public endpoint_step {
 public:
  explicit tap_step(std::unique_ptr<destination_base> d) : d_(std::move(d)) {}
  std::string_view operation() const override { return "tap"; }
  std::string_view adapter() const override { return d_->adapter(); }
  bool synchronous() const noexcept override { return true; }
  outcome run_now(exchange& ex, route_runtime& rt) override;
  const std::type_info& endpoint_type() const noexcept override { return typeid(*d_); }
  const void* endpoint() const noexcept override { return dynamic_cast<const void*>(d_.get()); }
  std::unique_ptr<step> with_double(std::shared_ptr<endpoint_double> d) const override {
    return std::make_unique<tap_step>(std::make_unique<detail::double_endpoint>(std::move(d), std::string(adapter())));
  }

 private:
  std::shared_ptr<destination_base> d_;
};

}  // namespace rc
