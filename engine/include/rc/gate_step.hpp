// gate_step: the one step every rate gate runs on. A gate is a limiter plus this step.
//
// The limiter (gates/limiters.hpp) is arithmetic on one key's state with the time passed in:
// decide(state, arrival) answers admit, wait (a fixed time), queue (a FIFO place whose schedule
// the limiter keeps) or refuse (retry after, and why). It reads no clock, takes no lock and knows
// nothing of exchanges, so it is tested with plain numbers (tests/engine/limiters_test.cpp).
//
// The step owns everything around it, once for every gate:
// - key selection: a selector that throws fails the exchange (RC5001, retryable, as any throwing
//   user callback; an rc::error it throws passes unchanged);
// - the per-key table (keyed_lru, max_keys entries): an entry is forgotten only when it is idle
//   (the limiter says so and nobody waits on it). When every candidate is busy, the new key goes
//   to the gate's overflow (events say `overflow: true`) or is refused (table_full()). A limiter
//   with an `overflow_counter` (the hit counters) counts such keys in a count-min sketch rolled
//   with its window (gates/count_min_sketch.hpp): each key keeps its own estimate, which only
//   over-counts, and a key with hits still counted there stays there until they have left, so
//   entering the table never forgets them. Other limiters share one state and one FIFO queue
//   (throttle's overflow bucket); while it has waiters, a key not in the table joins them, so
//   one key's exchanges never overtake each other. Both checks run only while the overflow holds
//   something: a table that never fills costs nothing more;
// - the split: told by attach() that several threads run it, a keyed gate with max_keys >=
//   split_from whose limiter allows it (no sketch, no bound on the whole gate's queue) splits
//   the table by the key hash's high bits into parts_for(max_keys) parts, each with its own
//   lock, queues and counters, so threads deciding for different keys seldom meet. The parts'
//   slots come from one chunk_pool (whole huge pages, the next made ahead outside every lock),
//   and their room from one budget of max_keys keys, room_block at a time. Each part's index is
//   sized at the split for its share of max_keys and some (none is rebuilt, under its lock, while
//   another thread waits for it), with the filter when the parts' indexes together are past the
//   caches (keyed_lru::reserve_index). The overflow state then has a lock of its own, taken
//   inside a part's (never the other way round), and the time is read again under it. One
//   thread keeps one table: faster there (cache locality);
// - waits. A `wait` is a timer from the arrival. A `queue` place is strictly FIFO per key: only
//   the head has a due time (head_wait); when it is admitted (head_admitted, which may move the
//   schedule after a stall) the next becomes head. Shutdown (the route's intake fires) admits a
//   waiting exchange at once. A gone client (the exchange's abort signal fires) drops it as
//   "client-gone"; a queued one also gives its place back (give_back) and those behind move up;
// - the refusal: RC5013, retryable, details {gate, retry_after_ms, key, label, ...}; its message
//   and details are built when first read (deferred_error over detail::gate_refusal_fields), so a
//   refusal nobody reads costs two small allocations, not a formatted message and a JSON object
//   copied into the exception. A refusal taken on the synchronous path (try_run_now) ends there;
// - the events passed / delayed / rejected: typed details (rc::gate_event: identity, key, overflow,
//   hits), rendered as JSON (plus the gate's fields) only when a subscriber reads them;
// - the counters (rc/metrics.hpp) behind the same three, bumped where the decision is taken,
//   under the lock held for it anyway (a plain increment: no locked instruction), and once more
//   with the wait's length when a waiting exchange is admitted. Nothing else per exchange.
//
// An unpaced pass builds no wait object: the wait lives in the run's frame only on the paths that
// wait. A gate that never waits (`waits` false) is synchronous when its inner step is, so a route
// of synchronous steps keeps its fast path. The decision is taken under the lock of the key's
// part, with the time read there, so a state never sees time go backwards.
//
// A gate G is its limiter plus what the step cannot know (see wrappers/throttle.cpp):
//   using state, ticket;                                 from the limiter
//   static constexpr gate_traits traits;
//   bool idle(const state&, time_point now) const;       forgetting it would change nothing
//   gate_decision decide(state&, const gate_arrival&, ticket&);   may throw: fails the exchange
//   void fields(nlohmann::json&, const ticket&, const gate_decision&, event_id) const;
//   static std::string refusal_text(const ticket&, const gate_decision&, std::optional<std::string_view> key);
//   static void refusal_details(nlohmann::json&, const ticket&, const gate_decision&);
//   static constexpr std::array<std::string_view, N> refusal_detail_names;   every name that adds
//     (static: a refusal's error builds its text from these when first read, maybe after the gate is gone)
// and, as traits say:
//   queues:          duration head_wait(const state&, time_point, uint32 queued) const;
//                    void head_admitted(state&, time_point, uint32 queued);  void give_back(state&, time_point);
//   !overflow:       gate_decision table_full() const;
//   overflow at run time: bool overflows() const (false: table_full() instead; needs both)
//   a sketch:        using overflow_counter = sketch_window<Counter>; decide() takes it as well
// and optionally:
//   its hit number:  std::uint64_t hits(const ticket&) const   (gate_event::hits)
//   a limit note:    void note(exchange&, route_runtime&, std::string_view key, ticket&, const gate_decision&);
//   the outcome:     bool wants_outcome() const; void outcome(state&, time_point, const ticket&, bool ok);
//   its own refusal: error refusal(std::string_view key, const ticket&, const gate_decision&) const;
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "rc/error.hpp"
#include "rc/event_details.hpp"
#include "rc/events.hpp"
#include "rc/gates/count_min_sketch.hpp"
#include "rc/gates/gate_decision.hpp"
#include "rc/gates/keyed_lru.hpp"
#include "rc/gates/spin_mutex.hpp"
#include "rc/keys.hpp"
#include "rc/route.hpp"
#include "rc/step.hpp"
#include "rc/wrappers/keyed_gate.hpp"

namespace rc {

/// What a limiter is, for the step.
struct gate_traits {
  std::string_view option;  // option name, in messages: "throttle"
  std::string_view gate;    // details' and notes' "gate": "throttle", "slowDown", "rateLimit"
  event_id passed;
  event_id delayed;
  event_id rejected;
  bool waits;     // may answer wait or queue
  bool queues;    // may answer queue (needs head_wait, head_admitted, give_back)
  bool overflow;  // a full table sends the new key to the overflow (else table_full())
  /// Emitted once per exchange sent to the overflow; count_ = none.
  event_id overflowed = event_id::count_;
};

/// The options every gate shares.
struct gate_common {
  key_selector key;  // none = one shared state
  std::size_t max_keys = 10000;
  std::string label;
};

namespace detail {

// A waiting exchange's place in its key's queue. Lives in the waiting run's frame.
struct gate_queue_node {
  timer_wait* wait = nullptr;  // the exchange's scheduler wait: due time::max() until it is the head
  gate_queue_node* prev = nullptr;
  gate_queue_node* next = nullptr;
};

struct gate_no_node {};
struct gate_no_sketch {};

template <class L>
struct gate_sketch {
  using type = gate_no_sketch;
};
template <class L>
requires requires { typename L::overflow_counter; }
struct gate_sketch<L> {
  using type = typename L::overflow_counter;
};

template <class State, bool Queues>
struct gate_slot {
  State state{};
};
template <class State>
struct gate_slot<State, true> {
  State state{};
  std::uint32_t waiters = 0;
};

// One refusal's RC5013 message and details (deferred_error), for a gate whose limiter L formats
// them (L::refusal_text, L::refusal_details: static, as the error may outlive the gate). It copies
// what it reads. A transport that maps a refusal to a status reads retry_after_ms alone, and asks
// for names a gate's details never hold (an HTTP status, body or headers), without building them.
template <class L>
class gate_refusal_fields {
 public:
  gate_refusal_fields(std::optional<std::string_view> key, std::string label, const typename L::ticket& t,
                      const gate_decision& d)
      : key_(key ? std::string(*key) : std::string()),
        label_(std::move(label)),
        keyed_(key.has_value()),
        t_(t),
        decision_(d),
        retry_after_ms_(to_ms(d.wait)) {}

  std::string message() const {
    std::string msg = L::refusal_text(t_, decision_, keyed_ ? std::optional<std::string_view>(key_) : std::nullopt);
    msg += fmt::format(". Retry after ~{}ms.", static_cast<long long>(std::ceil(to_ms(decision_.wait))));
    return msg;
  }
  nlohmann::json details() const {
    nlohmann::json details = {{"gate", L::traits.gate}, {"retry_after_ms", retry_after_ms_}};
    if (keyed_) details["key"] = key_;
    if (!label_.empty()) details["label"] = label_;
    L::refusal_details(details, t_, decision_);
    return details;
  }
  const nlohmann::json* field(std::string_view name) const noexcept {
    return name == "retry_after_ms" ? &retry_after_ms_ : nullptr;
  }
  bool may_have(std::string_view name) const noexcept {
    if (name == "gate" || name == "retry_after_ms" || (keyed_ && name == "key") || (!label_.empty() && name == "label"))
      return true;
    return std::find(L::refusal_detail_names.begin(), L::refusal_detail_names.end(), name) !=
           L::refusal_detail_names.end();
  }

 private:
  std::string key_;
  std::string label_;
  bool keyed_;
  typename L::ticket t_;
  gate_decision decision_;
  nlohmann::json retry_after_ms_;
};

}  // namespace detail

template <class L>
class gate_step final : public wrapper, public keyed_gate {
  static constexpr gate_traits traits = L::traits;
  using slot = detail::gate_slot<typename L::state, traits.queues>;
  using ticket = typename L::ticket;
  using node_type = std::conditional_t<traits.queues, detail::gate_queue_node, detail::gate_no_node>;
  static constexpr bool has_note = requires(L & l, exchange& e, route_runtime& r, ticket& t, const gate_decision& d) {
    l.note(e, r, std::string_view{}, t, d);
  };
  static constexpr bool has_outcome = requires(L & l, typename L::state& s, time_point now, const ticket& t) {
    l.outcome(s, now, t, true);
  };
  static constexpr bool has_refusal = requires(const L& l, const ticket& t, const gate_decision& d) {
    { l.refusal(std::string_view{}, t, d) } -> std::same_as<error>;
  };
  using sketch_type = typename detail::gate_sketch<L>::type;
  static constexpr bool sketched = !std::is_same_v<sketch_type, detail::gate_no_sketch>;
  static constexpr bool has_table_full = requires(const L& l) {
    { l.table_full() } -> std::same_as<gate_decision>;
  };
  static_assert(traits.overflow || has_table_full, "a gate without an overflow refuses with table_full()");
  static_assert(!(sketched && traits.queues), "a sketch has no queue places");

 public:
  gate_step(L limiter, gate_common common, std::unique_ptr<step> inner, rc::scope s)
      : wrapper(std::move(inner), s),
        limiter_(std::move(limiter)),
        common_(std::move(common)),
        parts_(std::make_unique<part[]>(1)),
        hasher_(keyed_lru<slot>::key_hasher_for(common_.max_keys)),
        budget_(common_.max_keys),
        sketch_(make_sketch(common_.max_keys)) {
    parts_[0].table = keyed_lru<slot>(common_.max_keys);
  }

  // Several threads: a large keyed table is split (see split()). One thread keeps one table,
  // which is faster for it (a part's chunk and index lines stay in cache). Once split, it stays.
  void attach(unsigned threads) override {
    if (threads < 2 || part_count_ > 1 || !split()) return;
    const std::size_t n = parts_for(common_.max_keys);
    pool_ = std::make_unique<detail::chunk_pool>(keyed_lru<slot>::pool_bytes(common_.max_keys, n));
    auto parts = std::make_unique<part[]>(n);
    // Room in each index for the part's share of max_keys and an eighth more (the keys a hash
    // spreads over n parts differ from the share by about its square root).
    const std::size_t share = (common_.max_keys + n - 1) / n;
    const std::size_t reserved = share + share / 8;
    const bool filtered = keyed_lru<slot>::index_entries_for(reserved) * n >= keyed_lru<slot>::filter_from;
    for (std::size_t i = 0; i < n; ++i) {
      parts[i].table = keyed_lru<slot>(common_.max_keys, 0, pool_.get());
      parts[i].table.reserve_index(reserved, filtered);
    }
    parts_ = std::move(parts);
    part_count_ = n;
    part_shift_ = 32 - static_cast<unsigned>(std::countr_zero(n));
  }

  /// A keyed gate with at least this max_keys, whose limiter allows it, splits its table.
  static constexpr std::size_t split_from = 65536;
  /// A split table has a part for every keys_per_part of max_keys (a power of two parts, at most
  /// max_parts): enough that two threads seldom want one at once. (With each part's index sized
  /// at the split, 32, 64 and 128 parts at 1,000,000 keys ran alike on two threads.)
  static constexpr std::size_t keys_per_part = 4096;
  static constexpr std::size_t max_parts = 256;
  static constexpr std::size_t parts_for(std::size_t max_keys) noexcept {
    return std::min(max_parts, std::bit_floor(max_keys / keys_per_part));
  }
  /// Room a part of a split table takes from the gate's budget at a time.
  static constexpr std::size_t room_block = 32;

  /// How many parts the key table is split into (1: not split).
  std::size_t parts() const noexcept { return part_count_; }

  const L& limiter() const noexcept { return limiter_; }
  std::string_view wrapper_kind() const noexcept override { return traits.gate; }

  bool has_counters() const noexcept override { return true; }
  gate_snapshot read_counters() const override {
    gate_snapshot g = parts_[0].counters.read(parts_[0].passed.value());
    for (std::size_t i = 1; i < part_count_; ++i) parts_[i].counters.add_to(g, parts_[i].passed.value());
    return g;
  }
  std::string_view gate_label() const noexcept override { return common_.label; }

  keyed_gate_stats stats() const override {
    keyed_gate_stats st;
    st.parts = part_count_;
    for (std::size_t i = 0; i < part_count_; ++i) {
      std::lock_guard lock(parts_[i].mutex);
      st.keys += parts_[i].table.size();
      st.memory_bytes += parts_[i].table.memory_bytes();
      if constexpr (sketched) {
        if (i == 0) st.overflow_bytes = sketch_.memory_bytes();  // a sketched gate has one part
      }
    }
    st.memory_bytes += st.overflow_bytes;
    return st;
  }

  bool synchronous() const noexcept override { return !traits.waits && inner_is_sync(); }

  outcome run_now(exchange& ex, route_runtime& rt) override {
    if constexpr (traits.waits) {
      std::terminate();  // never synchronous
    } else {
      std::exception_ptr failure;
      arrival a = arrival_of(ex, failure);
      if (!failure) failure = decide_now(ex, rt, a, nullptr);
      if (failure) return outcome::failed(std::move(failure));
      if (a.decision.refused()) return refuse(ex, rt, a);
      emit_passed(ex, rt, a, false, a.now);
      if constexpr (has_outcome) {
        if (watches_outcome()) {
          if (!inner_) return watch_finish(ex, rt, a);
          outcome o = run_inner_now(ex, rt);
          deliver_outcome(a.key, a.overflow, a.t, rt.now(), o.ok());
          return o;
        }
      }
      return run_inner_now(ex, rt);
    }
  }

  // A gate that may wait, around a synchronous step, whose pass is admitted at once: the pass
  // and the step now, as run() would do them without waiting. Gates with a plain state only: the
  // decision is taken on a copy of the state, kept only when it admits, so a pass that must wait
  // (or is refused) leaves no trace and resume() takes it again. A keyed gate selects its key
  // here (once: the selector is a user callback) and hands it to resume() in `out.reason`; the
  // key's entry may have been made meanwhile, in the state a new key starts in, which is what
  // resume() would make.
  bool try_run_now(exchange& ex, route_runtime& rt, outcome& out) override {
    if constexpr (!traits.waits || !std::is_trivially_copyable_v<typename L::state>) {
      return false;
    } else {
      if (!inner_is_sync()) return false;
      std::exception_ptr failure;
      arrival a = arrival_of(ex, failure);
      if (failure) {
        out = outcome::failed(std::move(failure));
        return true;
      }
      switch (admit_now(ex, rt, a)) {
        case first_decision::later:
          if (keyed()) out.reason = std::move(a.key);
          return false;
        case first_decision::refused:
          out = refuse(ex, rt, a);
          return true;
        case first_decision::admitted:
          break;
      }
      emit_passed(ex, rt, a, false, a.now);
      if constexpr (has_outcome) {
        if (watches_outcome()) {
          if (!inner_) {
            out = watch_finish(ex, rt, a);
            return true;
          }
          out = run_inner_now(ex, rt);
          deliver_outcome(a.key, a.overflow, a.t, rt.now(), out.ok());
          return true;
        }
      }
      out = run_inner_now(ex, rt);
      return true;
    }
  }

  task<outcome> run(exchange& ex, route_runtime& rt) override { return run_from(ex, rt, no_key{}); }

  // After try_run_now: a keyed gate whose inner step is synchronous has its key selected already.
  task<outcome> resume(exchange& ex, route_runtime& rt, outcome partial) override {
    if constexpr (traits.waits && std::is_trivially_copyable_v<typename L::state>) {
      if (keyed() && inner_is_sync()) return run_from(ex, rt, std::move(partial.reason));
    }
    return run_from(ex, rt, no_key{});
  }

 private:
  struct no_key {};

  struct wait_queue {
    detail::gate_queue_node* head = nullptr;
    detail::gate_queue_node* tail = nullptr;
  };

  // A part of the key table with its lock: the keys whose hash falls in it, their queues, and
  // the counters of the decisions taken under that lock. Routes may run on several threads. A
  // spin lock: the sections are short, and sleeping in the kernel for a taken lock cost more than
  // they do (gates/spin_mutex.hpp). An unkeyed gate, and most keyed ones, have one part, which
  // also guards the one or overflow state (single_); a split table's parts take overflow_mutex_
  // for it, inside their own lock. A part starts on a cache line of its own, which holds the lock,
  // the count that most decisions bump and the table's fields every decision uses: one line to
  // move between threads that take turns at a part, not two.
  struct alignas(64) part {
    mutable detail::spin_mutex mutex;
    locked_count passed;  // admitted without a wait (the rest of the counts are in counters)
    keyed_lru<slot> table{1};
    gate_counters counters;
    std::unordered_map<const slot*, wait_queue> queues;  // keyed slots with waiters only
    std::size_t waiting = 0;  // queued exchanges whose key is this part's (in the overflow too)
  };

  // run() proper; `selected` is the key try_run_now selected, or no_key (the frame of an unkeyed
  // or not yet selected run keeps no room for it).
  template <class Selected>
  task<outcome> run_from(exchange& ex, route_runtime& rt, Selected selected) {
    std::exception_ptr failure;  // one slot in the frame for both decisions
    arrival a = [&]() -> arrival {
      if constexpr (std::is_same_v<Selected, std::string>)
        return arrival{.key = std::move(selected)};
      else
        return arrival_of(ex, failure);
    }();
    if (!failure) failure = decide_now(ex, rt, a, nullptr);
    if (failure) co_return outcome::failed(std::move(failure));
    if (a.decision.refused()) co_return refuse(ex, rt, a);
    bool waited = false;
    time_point passed_at = a.now;  // admitted at once: when it was decided, on arrival
    if constexpr (traits.waits) {
      if (!a.decision.admitted()) {
        // Only a paced pass builds a wait. A queue place must exist before the place is taken
        // (the exchange ahead wakes this one through it), so the decision is taken again with it.
        std::optional<scheduler::wait_awaiter> wait;
        node_type node{};
        if (a.decision.what == gate_decision::kind::wait) {
          wait.emplace(rt.clock().wait_until(a.now + a.decision.wait, &rt.intake(), ex.abort_signal()));
        } else if constexpr (traits.queues) {
          wait.emplace(rt.clock().wait_queued(&rt.intake(), ex.abort_signal()));
          node.wait = &wait->node;
          failure = decide_now(ex, rt, a, &node);
          if (failure) co_return outcome::failed(std::move(failure));
          if (a.decision.refused()) co_return refuse(ex, rt, a);
        }
        if (!a.decision.admitted()) {
          rt.events().emit(traits.delayed, [&] { return event_of<traits.delayed>(ex, rt, a); });
          const wait_result r = co_await wait->by_ref();
          const bool client_gone = r == wait_result::cancelled && ex.abort_signal() != nullptr &&
                                   ex.abort_signal()->fired() && !rt.intake().fired();
          bool decided = false;  // passed_at read by the limiter's admission
          if constexpr (traits.queues) {
            if (a.decision.what == gate_decision::kind::queue) {
              if (r == wait_result::elapsed) {
                passed_at = admit_head(a, node, rt);
                decided = true;
              } else {
                leave_queue(a, node, rt, client_gone);
              }
            }
          }
          if (client_gone) co_return outcome::dropped("client-gone");
          if (!decided) passed_at = rt.now();
          waited = true;  // the wait elapsed, or the route is shutting down: admitted now
        }
      }
    }
    emit_passed(ex, rt, a, waited, passed_at);
    if constexpr (has_outcome) {
      if (watches_outcome()) {
        if (!inner_) co_return watch_finish(ex, rt, a);
        outcome o = co_await run_inner(ex, rt);
        deliver_outcome(a.key, a.overflow, a.t, rt.now(), o.ok());
        co_return o;
      }
    }
    co_return co_await run_inner(ex, rt);
  }

  // One arrival as the run sees it.
  // Ordered for a small frame: a parked exchange keeps it (an empty ticket takes no room).
  struct arrival {
    std::string key;
    time_point now{};
    gate_decision decision;
    bool overflow = false;  // counted in the shared state although keyed: the table was full
    [[no_unique_address]] ticket t{};
  };

  bool keyed() const noexcept { return static_cast<bool>(common_.key); }

  // try_run_now's decision (plain state): admitted or refused, the state then updated as
  // decide_now would (a refusal is final, and may count: a hit counter's); or later, nothing
  // changed, for a pass that must wait. A keyed gate's key is in a.key already; a key the table
  // sends to the overflow is left to resume() (later). A limiter that throws leaves it to
  // resume(), which fails the exchange.
  enum class first_decision : std::uint8_t { admitted, refused, later };
  first_decision admit_now(exchange& ex, route_runtime& rt, arrival& a) {
    try {
      // The key's hash before the lock: the lock is held for the table and the decision only.
      const std::uint32_t home = home_of(a.key);
      part& p = part_of(home);
      const auto h = hasher_(home);
      if (keyed()) p.table.prefetch(h);
      if (pool_) pool_->prepare();  // a new huge page's zeroing, outside every lock
      std::lock_guard lock(p.mutex);
      a.now = rt.now();
      slot* s = &single_;  // an unkeyed gate: one part
      if (keyed()) {
        s = table_slot(p, a, h);
        if (s == nullptr) return first_decision::later;
      }
      gate_arrival in{.now = a.now, .can_queue = false, .deadline = ex.deadline()};
      if constexpr (traits.queues) {
        in.queued = s->waiters;
        in.waiting = p.waiting;
      }
      typename L::state trial = s->state;
      a.t = ticket{};
      a.decision = limiter_.decide(trial, in, a.t);
      if (a.decision.admitted()) {
        p.passed.bump_locked();
      } else if (a.decision.refused()) {
        p.counters.rejected_locked();
      } else {
        return first_decision::later;
      }
      s->state = trial;
    } catch (...) {
      return first_decision::later;
    }
    if constexpr (has_note) limiter_.note(ex, rt, a.key, a.t, a.decision);
    return a.decision.admitted() ? first_decision::admitted : first_decision::refused;
  }

  // The exchange's arrival, before its first decision: with its key for a keyed gate, which the
  // selector returns straight into it (assigning it to a made arrival would copy a short key's
  // characters once more). When the selector throws, an arrival with no key, and in `failure`
  // what the exchange fails with (selector_failure).
  arrival arrival_of(exchange& ex, std::exception_ptr& failure) {
    if (!keyed()) return arrival{};
    try {
      return arrival{.key = common_.key(ex)};
    } catch (...) {
      failure = selector_failure();
      return arrival{};
    }
  }

  // What a throwing key selector fails the exchange with, called in its catch block: an rc::error
  // as it is, any other exception as RC5001 (retryable) naming the gate's key option, with the
  // original as cause.
  std::exception_ptr selector_failure() const {
    try {
      throw;
    } catch (const error&) {
      return std::current_exception();
    } catch (...) {
      return std::make_exception_ptr(
          error(errc::step_failed,
                fmt::format("{}({{ key }}) selector threw: {}", traits.option, message_of(std::current_exception())),
                true, std::current_exception()));
    }
  }

  bool idle(const slot& s, time_point now) const {
    if constexpr (traits.queues) {
      if (s.waiters != 0) return false;
    }
    return limiter_.idle(s.state, now);
  }

  static sketch_type make_sketch(std::size_t max_keys) {
    if constexpr (sketched)
      return sketch_type(max_keys);
    else
      return {};
  }

  bool overflows() const {
    if constexpr (requires(const L& l) { l.overflows(); })
      return limiter_.overflows();
    else
      return traits.overflow;
  }

  // The key's slot in its part's table (p's lock held), made if needed; null sends the key to the
  // overflow.
  slot* table_slot(part& p, const arrival& a, typename keyed_lru<slot>::key_hash h) {
    // Only while the overflow holds something: a key that has hits counted (or exchanges waiting)
    // there and no entry in the table stays in the overflow. (Its part's lock orders this check
    // against the key's own exchanges entering the overflow: they hold it when they do.)
    if constexpr (sketched) {
      if (!sketch_.is_idle(a.now) && p.table.find(a.key, h) == nullptr && !sketch_.cell_of(a.key).is_idle(a.now))
        return nullptr;
    } else if constexpr (traits.queues) {
      if (overflow_waiters_.load(std::memory_order_relaxed) != 0 && p.table.find(a.key, h) == nullptr) return nullptr;
    }
    return p.table.touch(
        a.key, h, [&](const slot& x) { return idle(x, a.now); }, [this] { return take_room(); });
  }

  // ---- the split table ----

  bool split() const {
    if (!keyed() || common_.max_keys < split_from) return false;
    if constexpr (sketched) {
      return false;  // the sketch is the one overflow of every part: kept under one lock
    } else if constexpr (requires(const L& l) { l.reads_waiting(); }) {
      return !limiter_.reads_waiting();  // a bound on the whole gate's queue: one count, one lock
    } else {
      return true;
    }
  }

  // The hash bits a key's part and its place in the part's table come from (0 unkeyed: one part).
  std::uint32_t home_of(std::string_view key) const noexcept { return keyed() ? keyed_lru<slot>::home_of(key) : 0; }

  // A key's part: the high bits of its hash (a table probes from the low ones). One part shifts
  // all 32 out.
  part& part_of(std::uint32_t home) const noexcept { return parts_[std::uint64_t{home} >> part_shift_]; }

  // Room for up to room_block more keys out of the gate's max_keys, for a part whose room is taken.
  std::size_t take_room() noexcept {
    std::size_t left = budget_.load(std::memory_order_relaxed);
    while (left != 0) {
      const std::size_t n = std::min(left, room_block);
      if (budget_.compare_exchange_weak(left, left - n, std::memory_order_relaxed)) return n;
    }
    return 0;
  }

  // The lock to take, inside the part's, for a decision on `s`: the overflow state (single_,
  // single_queue_) of a split table is shared by its parts and has a lock of its own. Any other
  // slot, or one part (every unkeyed gate has one): none, the part's lock covers it.
  detail::spin_mutex* overflow_lock_of(const slot* s) const noexcept {
    return s == &single_ && part_count_ > 1 ? &overflow_mutex_ : nullptr;
  }
  class overflow_guard {
   public:
    explicit overflow_guard(detail::spin_mutex* m) noexcept : m_(m) {
      if (m_ != nullptr) m_->lock();
    }
    overflow_guard(const overflow_guard&) = delete;
    overflow_guard& operator=(const overflow_guard&) = delete;
    ~overflow_guard() {
      if (m_ != nullptr) m_->unlock();
    }
    bool held() const noexcept { return m_ != nullptr; }

   private:
    detail::spin_mutex* m_;
  };

  // Finds (or makes) the key's slot and asks the limiter; links a queue place when given one.
  // Null, or what the limiter threw. The time is read under the lock, so a
  // state never sees time go backwards.
  std::exception_ptr decide_now(exchange& ex, route_runtime& rt, arrival& a, node_type* node) {
    try {
      const std::uint32_t home = home_of(a.key);
      part& p = part_of(home);
      if (pool_) pool_->prepare();
      std::lock_guard lock(p.mutex);
      a.now = rt.now();
      slot* s = &single_;
      a.overflow = false;
      a.t = ticket{};
      gate_arrival in{.now = a.now, .can_queue = node != nullptr, .deadline = ex.deadline()};
      if (keyed()) {
        s = table_slot(p, a, hasher_(home));
        if (s == nullptr) {
          if constexpr (sketched) {
            a.overflow = true;
            auto cell = sketch_.cell_of(a.key);
            a.decision = limiter_.decide(cell, in, a.t);
          } else if (overflows()) {
            s = &single_;
            a.overflow = true;
          } else if constexpr (has_table_full) {
            a.decision = limiter_.table_full();
            p.counters.rejected_locked();
            return nullptr;
          }
        }
      }
      if (s != nullptr) {
        const overflow_guard shared(overflow_lock_of(s));
        if (shared.held()) a.now = in.now = rt.now();  // read again under the lock of the state it meets
        if constexpr (traits.queues) {
          in.queued = s->waiters;
          in.waiting = p.waiting;
        }
        a.decision = limiter_.decide(s->state, in, a.t);
        if constexpr (traits.queues) {
          if (node != nullptr && a.decision.what == gate_decision::kind::queue)
            enqueue(p, *s, *node, a.now + a.decision.wait);
        }
      }
      count_locked(p, a.decision, node != nullptr);
    } catch (...) {
      return std::current_exception();
    }
    // A queue answer without a place is not final: the step asks again with one.
    if (node != nullptr || a.decision.what != gate_decision::kind::queue) {
      if constexpr (traits.overflowed != event_id::count_) {
        if (a.overflow) rt.events().emit(traits.overflowed, [&] { return overflow_fields(ex, rt, a); });
      }
      if constexpr (has_note) limiter_.note(ex, rt, a.key, a.t, a.decision);
    }
    return nullptr;
  }

  // A final decision, under the lock. A queue answer without a place is not final (the step asks
  // again with one).
  void count_locked(part& p, const gate_decision& d, bool has_place) noexcept {
    if (d.admitted())
      p.passed.bump_locked();
    else if (d.refused())
      p.counters.rejected_locked();
    else if (has_place || d.what != gate_decision::kind::queue)
      p.counters.delayed_locked();
  }

  // ---- the FIFO queue (queueing limiters) ----

  // p's lock held, and the overflow's too when s is the overflow state.
  void enqueue(part& p, slot& s, detail::gate_queue_node& node, time_point due) {
    wait_queue& q = queue_of(p, &s);
    if (q.tail != nullptr) {
      node.prev = q.tail;
      q.tail->next = &node;
      q.tail = &node;
    } else {
      q.head = q.tail = &node;
      node.wait->due = due;  // not suspended yet: nobody else can see this wait
    }
    ++s.waiters;
    ++p.waiting;
    if (&s == &single_) overflow_waiters_.store(s.waiters, std::memory_order_relaxed);
  }

  slot* slot_of(part& p, const arrival& a, std::uint32_t home) {
    // A slot with waiters is never evicted, so a waiter always finds its own.
    return (!keyed() || a.overflow) ? &single_ : p.table.find(a.key, hasher_(home));
  }

  wait_queue& queue_of(part& p, const slot* s) { return s == &single_ ? single_queue_ : p.queues[s]; }

  // Unlinks a node; when it was the head, wakes the next one on its ticket. Locks as enqueue.
  void unlink(part& p, slot& s, detail::gate_queue_node& node, scheduler& clock, time_point now) {
    wait_queue& q = queue_of(p, &s);
    const bool was_head = q.head == &node;
    (node.prev ? node.prev->next : q.head) = node.next;
    (node.next ? node.next->prev : q.tail) = node.prev;
    --s.waiters;
    --p.waiting;
    if (&s == &single_) overflow_waiters_.store(s.waiters, std::memory_order_relaxed);
    if (q.head == nullptr) {
      if (&s != &single_) p.queues.erase(&s);
    } else if (was_head) {
      clock.reschedule(*q.head->wait, now + limiter_.head_wait(s.state, now, s.waiters));
    }
  }

  // The head's wait elapsed: the limiter admits it (and may move the schedule after a stall).
  // Returns the time it was admitted at, the one the limiter judged.
  time_point admit_head(const arrival& a, detail::gate_queue_node& node, route_runtime& rt) {
    std::optional<time_point> at;
    with_queue_slot(a, [&](part& p, slot& s) {
      const time_point now = rt.now();
      limiter_.head_admitted(s.state, now, s.waiters);
      unlink(p, s, node, rt.clock(), now);
      at = now;
    });
    return at ? *at : rt.now();
  }

  // Leaves the queue without being admitted on schedule: shutdown admits it at once (its place is
  // spent), a gone client gives its place back and those behind move up.
  void leave_queue(const arrival& a, detail::gate_queue_node& node, route_runtime& rt, bool client_gone) {
    with_queue_slot(a, [&](part& p, slot& s) {
      const time_point now = rt.now();
      if (client_gone) limiter_.give_back(s.state, now);
      unlink(p, s, node, rt.clock(), now);
    });
  }

  // f(part, slot) on the slot a waiting exchange queued on, under the locks a decision on it takes.
  template <class F>
  void with_queue_slot(const arrival& a, F&& f) {
    const std::uint32_t home = home_of(a.key);
    part& p = part_of(home);
    std::lock_guard lock(p.mutex);
    slot* s = slot_of(p, a, home);
    if (s == nullptr) return;  // cannot happen (see slot_of)
    const overflow_guard shared(overflow_lock_of(s));
    f(p, *s);
  }

  // ---- the downstream outcome (limiters that give back on it) ----

  bool watches_outcome() const {
    if constexpr (requires(const L& l) { l.wants_outcome(); })
      return limiter_.wants_outcome();
    else
      return false;
  }

  void deliver_outcome(const std::string& key, bool overflow, const ticket& t, time_point now, bool succeeded) {
    if constexpr (has_outcome) {
      const std::uint32_t home = home_of(key);
      part& p = part_of(home);
      std::lock_guard lock(p.mutex);
      slot* s = !keyed() ? &single_ : overflow ? nullptr : p.table.find(key, hasher_(home));
      if constexpr (!sketched) {
        if (overflow) s = &single_;
      }
      const overflow_guard shared(overflow_lock_of(s));
      // An overflowed hit in a sketch is never given back (count_min_sketch.hpp says why).
      if (s != nullptr) limiter_.outcome(s->state, now, t, succeeded);
    }
  }

  // Route scope: the run's final outcome decides.
  outcome watch_finish(exchange& ex, route_runtime& rt, const arrival& a) {
    ex.on_finish([this, &rt, key = a.key, overflow = a.overflow, t = a.t](bool succeeded) {
      deliver_outcome(key, overflow, t, rt.now(), succeeded);
    });
    return outcome::proceed();
  }

  // ---- refusal and events ----

  outcome refuse(exchange& ex, route_runtime& rt, arrival& a) {
    rt.events().emit(traits.rejected, [&] { return event_of<traits.rejected>(ex, rt, a); });
    return outcome::failed(std::make_exception_ptr(refusal(a)));
  }

  error refusal(const arrival& a) const {
    if constexpr (has_refusal) {
      return limiter_.refusal(keyed() ? std::string_view(a.key) : std::string_view{}, a.t, a.decision);
    } else {
      return deferred_error(
          errc::rate_limited, true,
          detail::gate_refusal_fields<L>(keyed() ? std::optional<std::string_view>(a.key) : std::nullopt, common_.label,
                                         a.t, a.decision));
    }
  }

  nlohmann::json fields(const exchange& ex, const route_runtime& rt, const arrival& a, event_id which) const {
    auto j = identity(ex, rt, common_.label);
    if (keyed()) j["key"] = a.key;
    if (a.overflow) j["overflow"] = true;
    limiter_.fields(j, a.t, a.decision, which);
    return j;
  }

  nlohmann::json overflow_fields(const exchange& ex, const route_runtime& rt, const arrival& a) const {
    auto j = identity(ex, rt, common_.label);
    j["key"] = a.key;
    j["maxKeys"] = common_.max_keys;
    return j;
  }

  // Out of line and cold: the histogram's bucket search stays off the unpaced path's code.
  [[gnu::noinline, gnu::cold]] void count_waited(duration elapsed) noexcept {
    parts_[0].counters.passed_after(elapsed);
  }

  void emit_passed(const exchange& ex, route_runtime& rt, const arrival& a, bool waited, time_point passed_at) {
    const duration elapsed = passed_at - a.now;
    if (waited) count_waited(elapsed);  // admitted at once: counted with the decision
    rt.events().emit(traits.passed, [&] {
      gate_event g = event_of<traits.passed>(ex, rt, a);
      g.waited = waited;
      g.elapsed = elapsed;
      g.passed_at = passed_at;
      return g;
    });
  }

  // The typed details of passed / delayed / rejected; the JSON is rendered by write_event, only
  // when a subscriber reads it. `a` outlives the delivery (it is the run's).
  template <event_id Which>
  gate_event event_of(const exchange& ex, const route_runtime& rt, const arrival& a) const {
    gate_event g;
    g.route = &rt;
    g.ex = &ex;
    g.gate = this;
    g.keyed = keyed();
    if (g.keyed) g.key = a.key;
    g.overflow = a.overflow;
    g.wait = a.decision.wait;
    if constexpr (requires(const L& l, const ticket& t) { l.hits(t); }) g.hits = limiter_.hits(a.t);
    g.impl = &a;
    g.write = &write_event<Which>;
    return g;
  }

  template <event_id Which>
  static void write_event(const void* impl, const gate_event& g, nlohmann::json& j) {
    const auto& self = static_cast<const gate_step&>(*g.gate);
    const arrival& a = *static_cast<const arrival*>(impl);
    j = self.fields(*g.ex, *g.route, a, Which);
    if constexpr (Which == traits.passed && traits.waits) {
      j["waited"] = g.waited;
      j["elapsed"] = to_ms(g.elapsed);
    }
    if constexpr (Which == traits.rejected) j["retryAfterMs"] = to_ms(a.decision.wait);
  }

  L limiter_;
  gate_common common_;
  std::size_t part_count_ = 1;
  unsigned part_shift_ = 32;                  // 32 - log2(part_count_): a key's part is its hash's high bits
  std::unique_ptr<detail::chunk_pool> pool_;  // a split table's slots (made before the parts, freed after)
  std::unique_ptr<part[]> parts_;
  typename keyed_lru<slot>::hasher hasher_;  // every part's: all have the gate's max_keys
  // Keys a split table's parts may still take room for; on a line of its own, away from what
  // every decision reads above.
  alignas(64) std::atomic<std::size_t> budget_;
  mutable detail::spin_mutex overflow_mutex_;
  slot single_;  // the one state of an unkeyed gate; the overflow state of a keyed one
  std::atomic<std::uint32_t> overflow_waiters_{0};  // single_.waiters, for a look without its lock
  [[no_unique_address]] sketch_type sketch_;        // the overflow of a hit-counting gate (one part)
  wait_queue single_queue_;
};

/// Builds a gate from a limiter (validated already) and the shared options.
template <class L>
std::unique_ptr<step> make_gate_step(L limiter, gate_common common, std::unique_ptr<step> inner, scope s) {
  return std::make_unique<gate_step<L>>(std::move(limiter), std::move(common), std::move(inner), s);
}

}  // namespace rc
