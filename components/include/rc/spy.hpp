// spy<T>(): a test endpoint that records every exchange it sees: body, headers, id, the
// (virtual) time it arrived and the role it was used in. Copies share one record, so keep one
// and pass it to the route. Three roles:
//   .to(out)                  destination: records, the body is unchanged
//   .request<T>(out)          enricher: records and replies with the body unchanged
//   .process(out)             processor: records, the exchange goes on unchanged
// calls() counts each role; received() is every record in arrival order, whatever the role.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "rc/endpoint.hpp"
#include "rc/error.hpp"

namespace rc {

/// How often a spy (or a mock) was used in each role.
struct spy_calls {
  std::size_t send = 0;     // as a destination (.to, .tap)
  std::size_t enrich = 0;   // as a request/reply endpoint (.request)
  std::size_t process = 0;  // as a processor (.process)

  bool operator==(const spy_calls&) const = default;
};

template <class T>
class spy final : public destination_base {
 public:
  enum class role { send, enrich, process };
  struct record {
    T body;
    header_map headers;
    std::string exchange_id;
    time_point at;
    role used_as = role::send;
  };

  spy() : state_(std::make_shared<state>()) {}
  std::string_view adapter() const override { return "spy"; }
  void send_now(exchange& ex, route_runtime& rt) override { keep(ex, rt.now(), role::send); }

  /// Enricher: the reply is a copy of the exchange, so the body stays as it was.
  task<exchange> call(exchange& ex, route_runtime& rt) {
    keep(ex, rt.now(), role::enrich);
    co_return ex.clone();
  }

  /// Processor (.process(spy)): records; the exchange goes on unchanged.
  void operator()(exchange& ex) const { keep(ex, ex.route() ? ex.route()->now() : time_point{}, role::process); }

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
  /// The latest record; RC5002 when nothing was received.
  record last() const {
    std::lock_guard lock(state_->mutex);
    if (state_->received.empty()) throw error(errc::validation, "spy.last(): the spy has received nothing");
    return state_->received.back();
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
  spy_calls calls() const {
    std::lock_guard lock(state_->mutex);
    return state_->calls;
  }
  /// Forgets every record and count.
  void reset() {
    std::lock_guard lock(state_->mutex);
    state_->received.clear();
    state_->calls = {};
  }

 private:
  struct state {
    mutable std::mutex mutex;
    std::vector<record> received;
    spy_calls calls;
  };

  void keep(const exchange& ex, time_point at, role r) const {
    std::lock_guard lock(state_->mutex);
    state_->received.push_back(record{ex.body<T>(), ex.headers(), ex.id(), at, r});
    switch (r) {
      case role::send:
        ++state_->calls.send;
        break;
      case role::enrich:
        ++state_->calls.enrich;
        break;
      case role::process:
        ++state_->calls.process;
        break;
    }
  }

  std::shared_ptr<state> state_;
};

}  // namespace rc
