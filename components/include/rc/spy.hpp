// spy<T>(): a test destination that records every exchange it receives: body, headers, id and
// the (virtual) time it arrived. Copies share one record, so keep one and pass it to .to().
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "rc/endpoint.hpp"

namespace rc {

template <class T>
class spy final : public destination_base {
 public:
  struct record {
    T body;
    header_map headers;
    std::string exchange_id;
    time_point at;
  };

  spy() : state_(std::make_shared<state>()) {}
  std::string_view adapter() const override { return "spy"; }
  void send_now(exchange& ex, route_runtime& rt) override {
    std::lock_guard lock(state_->mutex);
    state_->received.push_back(record{ex.body<T>(), ex.headers(), ex.id(), rt.now()});
  }

  std::vector<record> received() const {
    std::lock_guard lock(state_->mutex);
    return state_->received;
  }
  std::vector<T> bodies() const {
    std::lock_guard lock(state_->mutex);
    std::vector<T> out;
    for (const auto& r : state_->received) out.push_back(r.body);
    return out;
  }
  /// Arrival times relative to the engine epoch.
  std::vector<duration> times() const {
    std::lock_guard lock(state_->mutex);
    std::vector<duration> out;
    for (const auto& r : state_->received) out.push_back(r.at.time_since_epoch());
    return out;
  }
  std::size_t count() const {
    std::lock_guard lock(state_->mutex);
    return state_->received.size();
  }
  void reset() {
    std::lock_guard lock(state_->mutex);
    state_->received.clear();
  }

 private:
  struct state {
    mutable std::mutex mutex;
    std::vector<record> received;
  };
  std::shared_ptr<state> state_;
};

}  // namespace rc
