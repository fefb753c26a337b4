// A destination that takes a given time of virtual time, like a call to a slow service. By
// default it listens to the exchange's abort signal (as rc::http does) and fails when it fires;
// `listens = false` makes it ignore it (a call that cannot be interrupted). `fail_first` makes
// its first n calls fail after their time. Shared records say what happened.
#pragma once

#include <memory>
#include <rc/rc.hpp>
#include <stdexcept>
#include <vector>

namespace rc::test {

struct work_log {
  std::vector<duration> started;
  std::vector<duration> ended;  // when each call returned, in call order
  int completed = 0;
  int cut_short = 0;  // saw the abort signal
};

class slow_work final : public destination_base {
 public:
  slow_work(duration takes, std::shared_ptr<work_log> log, bool listens = true, int fail_first = 0)
      : takes_(takes), log_(std::move(log)), listens_(listens), fail_first_(fail_first) {}
  std::string_view adapter() const override { return "slow"; }
  bool synchronous() const noexcept override { return false; }
  task<void> send(exchange& ex, route_runtime& rt) override {
    log_->started.push_back(rt.now().time_since_epoch());
    const int call = static_cast<int>(log_->started.size());
    const wait_result r = co_await rt.clock().wait_until(rt.now() + takes_, listens_ ? ex.abort_signal() : nullptr);
    log_->ended.push_back(rt.now().time_since_epoch());
    if (r == wait_result::cancelled) {
      ++log_->cut_short;
      throw std::runtime_error("call abandoned");
    }
    if (call <= fail_first_) throw std::runtime_error("service failed");
    ++log_->completed;
  }

 private:
  duration takes_;
  std::shared_ptr<work_log> log_;
  bool listens_;
  int fail_first_;
};

}  // namespace rc::test
