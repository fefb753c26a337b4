// Per-key hit counters for slow_down and rate_limit: a bounded LRU of counters plus one overflow
// counter, so memory stays bounded whatever the keys and no key goes uncounted.
//
// A key is forgotten only when its counter is idle (no hit left in its window): forgetting it then
// changes nothing. When the table is full and the least recently used candidates still count,
// the new key is counted in the shared overflow counter (the one counter of an unkeyed gate).
// No locking inside: the gate serialises access.
#pragma once

#include <cstddef>
#include <string_view>

#include "rc/gates/keyed_lru.hpp"
#include "rc/gates/window_counter.hpp"
#include "rc/wrappers/keyed_gate.hpp"

namespace rc::detail {

template <class Counter>
class keyed_windows {
 public:
  struct counted {
    hit_result hit;
    const Counter* counter;  // valid until the next call
    bool overflow;           // counted in the shared counter although keyed
  };

  keyed_windows(bool keyed, std::size_t max_keys) : keyed_(keyed), table_(max_keys) {}

  counted increment(std::string_view key, time_point now, duration window) {
    Counter* c = &shared_;
    bool overflow = false;
    if (keyed_) {
      c = table_.touch(key, [now](const Counter& s) { return s.is_idle(now); });
      if (c == nullptr) {
        c = &shared_;
        overflow = true;
      }
    }
    return {c->increment(now, window), c, overflow};
  }

  /// Gives back the hit that increment() counted (a no-op once it stopped counting).
  void give_back(std::string_view key, bool overflow, time_point now, time_point counted_until) {
    Counter* c = (!keyed_ || overflow) ? &shared_ : table_.find(key);
    if (c != nullptr) c->decrement(now, counted_until);
  }

  keyed_gate_stats stats() const { return {table_.size(), table_.memory_bytes()}; }

 private:
  bool keyed_;
  Counter shared_;
  keyed_lru<Counter> table_;
};

}  // namespace rc::detail
