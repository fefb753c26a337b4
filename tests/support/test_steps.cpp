#include "support/test_steps.hpp"

namespace rc::test {
namespace {

class fn_step final : public step {
 public:
  fn_step(std::string_view name, std::function<void(exchange&)> f) : name_(name), f_(std::move(f)) {}
  std::string_view operation() const override { return name_; }
  bool synchronous() const noexcept override { return true; }
  outcome run_now(exchange& ex, route_runtime&) override {
    f_(ex);
    return outcome::proceed();
  }

 private:
  std::string name_;
  std::function<void(exchange&)> f_;
};

class int_burst final : public source<int> {
 public:
  explicit int_burst(int n) : n_(n) {}
  std::string_view adapter() const override { return "burst"; }
  task<void> run(source_context& sc) override {
    for (int i = 0; i < n_; ++i) sc.spawn(sc.make(i));
    co_return;
  }

 private:
  int n_;
};

}  // namespace

std::unique_ptr<step> lambda_step(std::string_view name, std::function<void(exchange&)> f) {
  return std::make_unique<fn_step>(name, std::move(f));
}

std::unique_ptr<source_base> burst_source(int n) { return std::make_unique<int_burst>(n); }

}  // namespace rc::test
