// simple(values): one exchange per element, all started at once (each runs until its first
// wait before the next starts), then the source is finished. On a context with several threads
// they start in batches of 1024 shared out among the threads (source_context::spawn_batch), so
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
  task<void> run(source_context& sc) override {
    if (!sequential_ && sc.route().ctx().threads() > 1) {
      co_await run_shared(sc);
      co_return;
    }
    std::size_t started = 0;
    for (auto& v : values_) {
      if (sc.stopping()) break;
      if (sequential_) {
        (void)co_await sc.emit(sc.make(std::move(v)));
      } else {
        sc.spawn(sc.make(std::move(v)));
        // Starting a large batch takes a while (3,000 exchanges: about 2 ms); let timers and
        // sockets in between, so a throttle's first slots are not missed while it runs.
        if (++started % yield_every == 0) co_await sc.route().clock().yield();
      }
    }
    values_.clear();
  }

 private:
  // Several threads: the values go out in batches that the threads share (spawn_batch), larger
  // than yield_every since the other threads keep timers and sockets going meanwhile.
  task<void> run_shared(source_context& sc) {
    std::vector<exchange> batch;
    batch.reserve(batch_size);
    for (std::size_t i = 0; i < values_.size() && !sc.stopping(); i += batch_size) {
      const std::size_t end = std::min(values_.size(), i + batch_size);
      for (std::size_t k = i; k < end; ++k) batch.push_back(sc.make(std::move(values_[k])));
      sc.spawn_batch(batch);
      batch.clear();
      co_await sc.route().clock().yield();
    }
    values_.clear();
  }

  static constexpr std::size_t yield_every = 128;
  static constexpr std::size_t batch_size = 1024;
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
