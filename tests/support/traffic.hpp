// Scripted traffic for gate tests in virtual time: requests at given times, each with a client
// header ("x-client"), an optional deadline (the caller's timeout) and an optional abort signal
// (the caller hangs up). Every run's end is recorded: when, how it ended, the rc::error of a
// failure and the limit notes the gates attached. Bodies are the request numbers, 1-based.
#pragma once

#include <memory>
#include <optional>
#include <rc/rc.hpp>
#include <string>
#include <utility>
#include <vector>

namespace rc::test {

struct request {
  duration at{};
  std::string client = "a";
  std::optional<duration> timeout;  // deadline = arrival + timeout
  cancel_signal* abort = nullptr;
};

struct response {
  int id = 0;
  duration arrived{};
  duration answered{};
  outcome::kind how = outcome::kind::proceed;
  std::string drop_reason;
  std::optional<rc::error> failure;
  std::vector<limit_note> notes;

  bool passed() const { return how == outcome::kind::proceed; }
  bool refused() const { return failure && failure->code() == errc::rate_limited; }
  /// The note of one gate ("slowDown", "rateLimit"), or nullptr.
  const limit_note* note(std::string_view gate) const {
    for (const auto& n : notes)
      if (n.gate == gate) return &n;
    return nullptr;
  }
};

/// The responses by request number (index 0 = request 1).
class traffic_log {
 public:
  traffic_log() : entries_(std::make_shared<std::vector<response>>()) {}
  const response& operator[](int id) const { return (*entries_).at(static_cast<std::size_t>(id - 1)); }
  std::size_t size() const { return entries_->size(); }
  const std::vector<response>& all() const { return *entries_; }

 private:
  friend class traffic;
  std::shared_ptr<std::vector<response>> entries_;
};

class traffic final : public source<int> {
 public:
  traffic(std::vector<request> script, traffic_log log) : script_(std::move(script)), log_(std::move(log)) {
    log_.entries_->resize(script_.size());
  }
  std::string_view adapter() const override { return "traffic"; }

  task<void> run(source_context& sc) override {
    int id = 0;
    for (const auto& r : script_) {
      ++id;
      if (co_await sc.sleep_until(time_point{} + r.at) == wait_result::cancelled) co_return;
      exchange ex = sc.make(id);
      if (!r.client.empty()) ex.set_header("x-client", r.client);
      if (r.timeout) ex.set_deadline(sc.now() + *r.timeout);
      if (r.abort) ex.set_abort_signal(r.abort);
      rc::spawn([rt = &sc.route(), entries = log_.entries_, id, arrived = sc.now().time_since_epoch(),
                 ex = std::move(ex)]() mutable -> task<void> {
        run_result result = co_await rt->process(std::move(ex));
        response& out = (*entries)[static_cast<std::size_t>(id - 1)];
        out.id = id;
        out.arrived = arrived;
        out.answered = rt->now().time_since_epoch();
        out.how = result.result.what;
        out.drop_reason = result.result.reason;
        if (result.result.is_fail()) out.failure = to_error(result.result.error);
        out.notes = result.ex.limit_notes();
      });
    }
  }

 private:
  std::vector<request> script_;
  traffic_log log_;
};

/// `n` requests of one client at the same time.
inline std::vector<request> burst(int n, duration at = {}, const std::string& client = "a") {
  return std::vector<request>(static_cast<std::size_t>(n), request{.at = at, .client = client});
}

inline std::vector<request> operator+(std::vector<request> a, const std::vector<request>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// Seconds as doubles (exact for the whole and half seconds these tests use).
inline double seconds(duration d) { return std::chrono::duration<double>(d).count(); }

/// When each request reached the spy, in seconds by request number; -1 if it never did.
template <class Spy>
std::vector<double> served_seconds(const Spy& spy, std::size_t requests) {
  std::vector<double> out(requests, -1);
  for (const auto& r : spy.received()) out.at(static_cast<std::size_t>(r.body - 1)) = seconds(r.at.time_since_epoch());
  return out;
}

}  // namespace rc::test
