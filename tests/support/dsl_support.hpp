// Helpers for the DSL and component tests: an event recorder, sources that emit on a virtual-time
// schedule, a Catch matcher for rc::error, and a reading of the process's resident memory.
#pragma once

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <rc/rc.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rc::test {

/// One event as a handler saw it.
struct recorded_event {
  std::string name;
  nlohmann::json details;
  time_point at;
  nlohmann::json envelope;  // {ts, contextId, details, _event}
};

/// Records every event (or one name) of a context, in order. Thread-safe.
class event_recorder {
 public:
  explicit event_recorder(context& ctx, std::string_view name = "*")
      : sub_(ctx.on(name, [this](const event& e) {
          std::lock_guard lock(mutex_);
          events_.push_back({std::string(e.name), e.details, e.at, e.to_json()});
        })) {}

  std::vector<recorded_event> all() const {
    std::lock_guard lock(mutex_);
    return events_;
  }
  std::vector<recorded_event> named(std::string_view name) const {
    std::lock_guard lock(mutex_);
    std::vector<recorded_event> out;
    for (const auto& e : events_)
      if (e.name == name) out.push_back(e);
    return out;
  }
  /// Event names in order, keeping only those starting with `prefix`.
  std::vector<std::string> names(std::string_view prefix = {}) const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& e : events_)
      if (e.name.rfind(prefix, 0) == 0) out.push_back(e.name);
    return out;
  }
  std::size_t count(std::string_view name) const { return named(name).size(); }

 private:
  mutable std::mutex mutex_;
  std::vector<recorded_event> events_;
  subscription sub_;  // declared last: unsubscribes before the list goes away
};

/// Emits each body at its offset from the source's start, without waiting for its run: arrivals
/// do not depend on how long earlier exchanges take.
template <class T>
class arrivals_source final : public source<T> {
 public:
  explicit arrivals_source(std::vector<std::pair<duration, T>> plan) : plan_(std::move(plan)) {}
  std::string_view adapter() const override { return "arrivals"; }
  task<void> run(source_context& sc) override {
    const time_point start = sc.now();
    for (auto& [offset, body] : plan_) {
      if (co_await sc.sleep_until(start + offset) == wait_result::cancelled) co_return;
      sc.spawn(sc.make(std::move(body)));
    }
  }

 private:
  std::vector<std::pair<duration, T>> plan_;
};

/// Bodies 0, 1, 2, ... arriving at the given offsets.
inline arrivals_source<int> arrivals(std::vector<duration> offsets) {
  std::vector<std::pair<duration, int>> plan;
  for (std::size_t i = 0; i < offsets.size(); ++i) plan.emplace_back(offsets[i], static_cast<int>(i));
  return arrivals_source<int>(std::move(plan));
}

/// Bodies 0 .. n-1, one every `gap` (the first at once), without waiting for their runs.
class paced_counter final : public source<std::uint64_t> {
 public:
  paced_counter(std::uint64_t n, duration gap) : n_(n), gap_(gap) {}
  std::string_view adapter() const override { return "paced"; }
  task<void> run(source_context& sc) override {
    const time_point start = sc.now();
    for (std::uint64_t i = 0; i < n_; ++i) {
      if (i > 0 && co_await sc.sleep_until(start + gap_ * static_cast<duration::rep>(i)) == wait_result::cancelled)
        co_return;
      sc.spawn(sc.make(i));
    }
  }

 private:
  std::uint64_t n_;
  duration gap_;
};

/// Matches an rc::error with this code whose message contains `text`.
class rc_error_matcher final : public Catch::MatcherBase<error> {
 public:
  rc_error_matcher(errc code, std::string text) : code_(code), text_(std::move(text)) {}
  bool match(const error& e) const override {
    return e.code() == code_ && e.message().find(text_) != std::string::npos;
  }
  std::string describe() const override {
    return "is an rc::error " + code_string(code_) + " whose message contains \"" + text_ + "\"";
  }

 private:
  errc code_;
  std::string text_;
};

inline rc_error_matcher rc_error(errc code, std::string text = {}) { return {code, std::move(text)}; }

/// Times as milliseconds (exact for whole microseconds), for readable comparisons.
inline std::vector<double> in_ms(const std::vector<duration>& times) {
  std::vector<double> out;
  for (auto t : times) out.push_back(to_ms(t));
  return out;
}

/// Resident set size of this process in KiB (Linux), 0 when unknown.
inline std::size_t resident_kib() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  std::size_t kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "VmRSS:", 6) == 0) {
      kib = std::strtoull(line + 6, nullptr, 10);
      break;
    }
  std::fclose(f);
  return kib;
}

}  // namespace rc::test
