// cache: remembers the body the next step produced (step scope) or the route's final body (route
// scope: the cache sits right below the gates in the fixed chain, around the resilience layers and
// the user steps, so a hit bypasses them all) under a key derived
// from the exchange, and on a later hit restores it without running the step.
//
// - key(ex) -> string; by default the JSON text of the body (a body without a JSON form fails
//   with RC5029). A throwing key fails the exchange with RC5029 (not retryable).
// - Only successes are stored; a failure or a drop is never cached.
// - The provider stores copies (the body type must be copyable: a body that cannot be copied is
//   not stored, route:cache:failed reports it with RC5003). The default is an in-memory LRU of
//   `max_entries` entries expiring after `ttl` of engine time (virtual in tests).
// - A provider failure on get fails the exchange with RC5028 (retryable), or with
//   `on_provider_error = bypass` runs the step as if the cache were not there (no store); either
//   way route:cache:failed {operation: "get"} reports it. A failure on store never fails the
//   exchange (route:cache:failed {operation: "put"}).
// - No stampede: while one exchange (the leader) runs the step for a key, other misses on the
//   same key wait for its result and report route:cache:hit. If the leader fails or drops, the
//   waiters try again and one of them leads. A waiter whose client went away (abort signal)
//   drops with "client-gone"; on shutdown (intake closed) a waiter runs the step itself.
//   Waiting needs an asynchronous run: when both the step and the provider are synchronous the
//   wrapper is synchronous too, and concurrent misses on other threads each run the step.
//
// Events route:cache:hit | miss | stored | failed {key} with the wrapper identity (+ label); a hit
// in route scope also emits route:exchange:restored {source: "cache"}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "rc/clock.hpp"
#include "rc/exchange.hpp"
#include "rc/options.hpp"
#include "rc/step.hpp"
#include "rc/task.hpp"

namespace rc {

/// Where cached bodies live. A networked store (Redis) implements get/put asynchronously and
/// serialises: any_body::to_json() gives a body's JSON, and such a provider, typed on the body,
/// rebuilds the value from it. A failure is an exception (the wrapper turns it into RC5028 on get,
/// route:cache:failed on put).
class cache_provider {
 public:
  virtual ~cache_provider() = default;
  /// A copy of the body stored under `key`, or nothing (absent or expired). `clock` is the
  /// engine's (virtual in tests); read it only when needed: a clock read is a real cost per hit.
  virtual task<std::optional<any_body>> get(const std::string& key, const scheduler& clock) = 0;
  /// Stores a copy of `body` under `key`, expiring `ttl` from now (never when empty).
  virtual task<void> put(const std::string& key, const any_body& body, std::optional<duration> ttl,
                         const scheduler& clock) = 0;

  /// True when get_now/put_now answer at once (an in-memory store): around a synchronous step
  /// the cache then runs without a coroutine.
  virtual bool synchronous() const noexcept { return false; }
  virtual std::optional<any_body> get_now(const std::string& key, const scheduler& clock);
  virtual void put_now(const std::string& key, const any_body& body, std::optional<duration> ttl,
                       const scheduler& clock);
};

/// The default provider: an in-memory LRU of copies, bounded by entry count, thread-safe.
class memory_cache_provider final : public cache_provider {
 public:
  explicit memory_cache_provider(std::size_t max_entries = 1000);
  ~memory_cache_provider() override;

  task<std::optional<any_body>> get(const std::string& key, const scheduler& clock) override;
  task<void> put(const std::string& key, const any_body& body, std::optional<duration> ttl,
                 const scheduler& clock) override;
  bool synchronous() const noexcept override { return true; }
  std::optional<any_body> get_now(const std::string& key, const scheduler& clock) override;
  void put_now(const std::string& key, const any_body& body, std::optional<duration> ttl,
               const scheduler& clock) override;

  std::size_t size() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// What a failing provider's get does to the exchange (a networked store that is down).
enum class cache_provider_error : std::uint8_t { fail, bypass };

struct cache_options {
  /// The cache key of an exchange. Default: the body's JSON text.
  std::function<std::string(const exchange&)> key;
  /// How long an entry lives. Default: until evicted.
  std::optional<duration> ttl;
  /// Bound of the default in-memory provider.
  std::size_t max_entries = 1000;
  /// Where entries live. Default: a memory_cache_provider of max_entries, one per wrapper.
  std::shared_ptr<cache_provider> provider;
  /// A get that fails: fail the exchange (RC5028) or run the step without the cache.
  cache_provider_error on_provider_error = cache_provider_error::fail;
  std::string label;

  static constexpr std::size_t max_entries_limit = 10'000'000;
  void validate() const;
};

std::unique_ptr<step> make_cache(cache_options options, std::unique_ptr<step> inner, scope s);

}  // namespace rc
