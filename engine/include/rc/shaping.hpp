// Shaping steps: dedupe, sample, debounce and batch (docs/operations.md, "Shaping").
//
// - dedupe: drops ("duplicate") an exchange whose key is reserved by one still in flight or was
//   committed by one that completed less than `ttl` ago. The key is reserved on entry, committed
//   when the exchange's run completes and released when it fails or is dropped, so a failed
//   exchange can be retried. The key table holds at most `max_keys` keys: a new key makes room by
//   evicting the least recently committed (or released) key; keys in flight are never evicted,
//   and when every key within reach is in flight the exchange fails with RC5034 (retryable).
// - sample: passes the n-th of every `every` exchanges, or the first of every `interval` (the
//   window opens at each passed exchange); the others drop ("sampled").
// - debounce: per key, holds each exchange and releases only the last of a burst, `wait` after
//   the last arrival, or `max_wait` after the burst's first arrival, whichever is first; the
//   superseded ones drop ("debounced"). When the route stops the held exchange is released at once.
// - batch: folds the bodies of consecutive exchanges into one std::vector<Body>, carried by a new
//   exchange (the batch) through the steps after batch(). A batch is flushed when it holds `size`
//   bodies (by the exchange that filled it, which waits for the batch's run: backpressure), when
//   `flush_interval` has passed since its first body (by a timer), or when the route stops (a
//   partial batch is flushed, never lost). Each item's run completes when its body is folded in.
//
// Only dedupe allocates per exchange (its on-finish hook); sample is a counter or a time check
// under a lock. Events are emitted only when someone listens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rc/exchange.hpp"
#include "rc/keys.hpp"
#include "rc/options.hpp"
#include "rc/step.hpp"

namespace rc {

struct dedupe_options {
  /// The key; empty: a hash of the body's JSON form (the builder refuses a body type without
  /// one, RC5003, so pass a key for it).
  key_selector key;
  /// How long a completed exchange's key keeps out duplicates (from its completion).
  duration ttl = std::chrono::minutes(5);
  /// Keys remembered at once (in flight and committed).
  std::size_t max_keys = 10000;

  void validate() const;
};

struct sample_options {
  /// Passes the every-th exchange (every = 3: the 3rd, 6th, ...). 0: not this mode.
  std::uint64_t every = 0;
  /// Passes the first exchange, then the first arriving at least `interval` after the last one
  /// passed. Zero: not this mode.
  duration interval{};

  void validate() const;
};

struct debounce_options {
  /// Quiet time after the last arrival of a burst before it is released (> 0).
  duration wait{};
  /// Debounce separately per key; empty: one burst for the whole step.
  key_selector key;
  /// Release at the latest this long after the burst's first arrival (zero: no limit; else >= wait).
  duration max_wait{};

  void validate() const;
};

struct batch_options {
  /// Bodies per batch (>= 1).
  std::size_t size = 1000;
  /// A batch that is not full is flushed this long after its first body (> 0).
  duration flush_interval = std::chrono::seconds(10);

  void validate() const;
};

/// dedupe's default key: a hash of the body's JSON form (hex).
std::string body_hash_key(const exchange& ex);

/// Makes a dedupe step; `key` must be set (the builder fills in the default).
std::unique_ptr<step> make_dedupe(dedupe_options o);
std::unique_ptr<step> make_sample(sample_options o);
std::unique_ptr<step> make_debounce(debounce_options o);

/// Folds the bodies of a batch (arrival order) into the batch exchange's body. May throw (the
/// batch then fails).
using batch_fold = std::function<void(exchange& batch, std::vector<any_body>&& bodies)>;

/// The batch step: holds the steps after batch() (the batch's pipeline).
class batch_step final : public step {
 public:
  batch_step(batch_options o, batch_fold fold, std::vector<std::unique_ptr<step>> sub);
  ~batch_step() override;

  std::string_view operation() const override { return "batch"; }
  task<outcome> run(exchange& ex, route_runtime& rt) override;

  /// The steps each batch runs (for wrapper naming and test kits; only before the route runs).
  std::vector<std::unique_ptr<step>>& sub_steps() noexcept { return sub_; }

 private:
  struct open_batch;
  struct state;
  task<void> flush(std::shared_ptr<open_batch> b, const char* reason, route_runtime& rt);
  task<void> flush_later(std::shared_ptr<open_batch> b, route_runtime& rt);
  void emit_stopped(route_runtime& rt, const std::string& batch_id);

  batch_options options_;
  batch_fold fold_;
  std::vector<std::unique_ptr<step>> sub_;
  std::unique_ptr<state> state_;
};

}  // namespace rc
