// simple(values): one exchange per element, all started at once (each runs until its first
// wait before the next starts), then the source is finished. On a context with several threads
// every thread makes and starts chunks of 1024 values in turn (source_context::spawn_shared), so
// several exchanges run at once. simple(value): one exchange.
// sequence(values): one at a time, each awaited before the next (natural backpressure).
// generate(fn): calls fn() for the next body until it returns nullopt, one at a time.
#pragma once

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

#include "rc/context.hpp"
#include "rc/endpoint.hpp"

namespace rc {

template <class T>
class simple_source final : public source<T> {
 public:
  simple_source(std::vector<T> values, bool sequential) : values_(std::move(values)), sequential_(sequential) {}
  std::string_view adapter() const override { return sequential_ ? "sequence" : "simple"; }
  // A plain function choosing one of three coroutines, so that each keeps only its own loop and
  // frame (rc-bench plain_seq and plain_burst pay for nothing the others need).
  task<void> run(source_context& sc) override {
    if (sequential_) return run_sequence(sc);
    if (sc.route().ctx().threads() > 1) return run_shared(sc);
    return run_burst(sc);
  }

 private:
  task<void> run_sequence(source_context& sc) {
    for (auto& v : values_) {
      if (sc.stopping()) break;
      // The result is not read: a run that has finished already (a synchronous route) is not
      // awaited, so its result is destroyed where it is rather than moved out first.
      emit_awaiter run = sc.emit(sc.make(std::move(v)));
      if (!run.await_ready()) (void)co_await run;
    }
    values_.clear();
  }

  task<void> run_burst(source_context& sc) {
    std::size_t started = 0;
    for (auto& v : values_) {
      if (sc.stopping()) break;
      sc.spawn(sc.make(std::move(v)));
      // Starting a large batch takes a while (3,000 exchanges: about 2 ms); let timers and
      // sockets in between, so a throttle's first slots are not missed while it runs.
      if (++started % yield_every == 0) co_await sc.route().clock().yield();
    }
    values_.clear();
  }

  // Several threads: every thread makes and starts its own chunks of the values
  // (source_context::spawn_shared), each taking the next chunk as it finishes one.
  task<void> run_shared(source_context& sc) {
    co_await sc.spawn_shared(
        values_.size(),
        [](void* self, std::size_t i, exchange& ex) {
          ex.set_body(std::move(static_cast<simple_source*>(self)->values_[i]));
        },
        this);
    values_.clear();
  }

  static constexpr std::size_t yield_every = 128;
  std::vector<T> values_;
  bool sequential_;
};

template <class T>
simple_source<T> simple(std::vector<T> values) {
  return simple_source<T>(std::move(values), false);
}
template <class T>
simple_source<T> simple(std::initializer_list<T> values) {
  return simple_source<T>(std::vector<T>(values), false);
}
template <class T>
simple_source<T> simple(T value) {
  std::vector<T> v;
  v.push_back(std::move(value));
  return simple_source<T>(std::move(v), false);
}
template <class T>
simple_source<T> sequence(std::vector<T> values) {
  return simple_source<T>(std::move(values), true);
}

template <class T>
class generator_source final : public source<T> {
 public:
  explicit generator_source(std::function<std::optional<T>()> next) : next_(std::move(next)) {}
  std::string_view adapter() const override { return "generate"; }
  task<void> run(source_context& sc) override {
    while (!sc.stopping()) {
      std::optional<T> v = next_();
      if (!v) break;
      (void)co_await sc.emit(sc.make(std::move(*v)));
    }
  }

 private:
  std::function<std::optional<T>()> next_;
};

/// Bodies from a function, one at a time, until it returns std::nullopt.
template <class F, class T = typename std::invoke_result_t<F&>::value_type>
generator_source<T> generate(F next) {
  return generator_source<T>(std::function<std::optional<T>()>(std::move(next)));
}

}  // namespace rc
