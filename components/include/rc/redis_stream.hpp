// rc::redis_stream(conn, "orders", {...}): a Redis Stream as a destination and as a source read
// through a consumer group, so several instances share the work without losing or doubling it.
//
// Destination (`to(rc::redis_stream(conn, "orders"))`): one XADD per exchange, with
// `MAXLEN ~ max_len` when set (Redis trims whole nodes, so the stream keeps at least max_len
// entries). Fields: `body` (a std::string body as is, any other body as its JSON text; an empty
// body writes no field) and, with `headers = true`, `headers` (the exchange's headers as a JSON
// object). `fields` replaces both with the caller's own field list. The exchange is unchanged (a
// stream-to-stream route keeps the consumed entry's id in its headers).
//
// Source (`from(rc::redis_stream(conn, "orders", {.group = "billing"}))`), body std::string:
// - Start: XGROUP CREATE <stream> <group> <start> MKSTREAM (an existing group is kept as it is).
//   Reads use a connection of their own (same server options as `conn`), since XREADGROUP BLOCK
//   holds its connection until entries arrive.
// - Backpressure: at most `max_in_flight` entries are read and not yet finished (XREADGROUP COUNT
//   is the free room); runs go on concurrently up to that bound.
// - Acknowledgement: an entry is XACKed only after its exchange has completed (or dropped: a
//   drop is a decision, not a failure). A failed exchange leaves the entry pending; after
//   `retry_delay` the consumer claims it again (XCLAIM to itself, which counts a delivery) and
//   runs it again, holding its slot meanwhile. An entry whose run fails on its `max_deliveries`-th
//   delivery, or that arrives with more deliveries than that (a consumer died on it each time), is
//   moved to the dead-letter stream (`dead_letter`, default "<stream>:dead": its fields plus
//   `error`, `stream`, `entryId`, `deliveries`) and acknowledged, both in one script so that
//   neither happens without the other.
// - Crashed consumers: every `claim_interval` the consumer runs XAUTOCLAIM for entries pending
//   longer than `min_idle` on any consumer of the group (one that died, or was cut off), and runs
//   them. min_idle must exceed the longest run: a run slower than that may be claimed and run by
//   another consumer too (delivery is at least once; an entry is acknowledged once).
// - Body: the `body` field (empty when absent). Headers: the `headers` field's members (as the
//   destination writes them), each other field as routecraft.redis.field.<name>, and
//   routecraft.redis.stream, .entryId and .deliveryCount (1 on the first delivery).
// - Redis down: the source emits plugin:redis:stream:error, waits (doubling from 50ms up to 2s)
//   and tries again; runs in flight keep their entries pending until an ack gets through.
// - Stop: intake closes the blocking read at once; runs in flight finish and are acknowledged.
//
// Events: plugin:redis:stream:dead (an entry moved to the dead-letter stream), :claimed (entries
// taken over from idle consumers), :error (a command failed; the source retries).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rc/endpoint.hpp"
#include "rc/events.hpp"
#include "rc/options.hpp"
#include "rc/redis.hpp"

namespace rc {

namespace redis_stream_headers {
inline constexpr std::string_view stream = "routecraft.redis.stream";
inline constexpr std::string_view entry_id = "routecraft.redis.entryId";
inline constexpr std::string_view delivery_count = "routecraft.redis.deliveryCount";
inline constexpr std::string_view field_prefix = "routecraft.redis.field.";
}  // namespace redis_stream_headers

inline const event_id redis_stream_dead = register_event("plugin:redis:stream:dead");
inline const event_id redis_stream_claimed = register_event("plugin:redis:stream:claimed");
inline const event_id redis_stream_error = register_event("plugin:redis:stream:error");

using redis_fields = std::vector<std::pair<std::string, std::string>>;

struct redis_stream_options {
  // ---- destination ----
  /// XADD ... MAXLEN ~ max_len: trim the stream to about this many entries (0 = never trim).
  std::size_t max_len = 0;
  /// Write the exchange's headers as the `headers` field.
  bool headers = true;
  /// The entry's fields from the exchange (replaces `body` / `headers`).
  std::function<redis_fields(const exchange&)> fields;

  // ---- source ----
  /// The consumer group.
  std::string group = "routecraft";
  /// This consumer's name in the group. Empty: host-pid-random (a restarted process is a new
  /// consumer; its predecessor's pending entries are claimed after min_idle).
  std::string consumer;
  /// Where a group created by this source starts: "0" (every entry in the stream) or "$" (new
  /// entries only).
  std::string start = "0";
  /// At most this many entries read and not finished. In [1, 100000].
  std::size_t max_in_flight = 64;
  /// How long one XREADGROUP waits for entries. In [1ms, 60s].
  duration block = std::chrono::seconds(1);
  /// Deliveries an entry gets before it goes to the dead-letter stream. In [1, 1000].
  std::uint32_t max_deliveries = 5;
  /// The dead-letter stream. Empty: "<stream>:dead".
  std::string dead_letter;
  /// An entry pending this long on any consumer may be claimed by this one (XAUTOCLAIM). >= 1ms.
  duration min_idle = std::chrono::seconds(30);
  /// How often to look for such entries. Zero: min_idle / 2.
  duration claim_interval{};
  /// Wait before running a failed entry again (its slot stays taken meanwhile). >= 0.
  duration retry_delay = std::chrono::milliseconds(100);
  /// Finish (a finite source) when a read finds nothing, nothing runs and the group has no
  /// pending entries left.
  bool stop_when_empty = false;

  void validate() const;
};

/// What one source instance did (tests and metrics).
struct redis_stream_stats {
  std::uint64_t delivered = 0;       // runs started (first deliveries and redeliveries)
  std::uint64_t acked = 0;           // XACKs that acknowledged an entry
  std::uint64_t ack_missed = 0;      // XACKs that found the entry no longer pending
  std::uint64_t retried = 0;         // failed entries claimed back and run again
  std::uint64_t dead = 0;            // entries moved to the dead-letter stream
  std::uint64_t claimed = 0;         // entries taken over by XAUTOCLAIM
  std::uint64_t peak_in_flight = 0;  // the most entries held at once
};

class redis_stream_endpoint final : public source<std::string>, public destination_base {
 public:
  redis_stream_endpoint(redis_connection& conn, std::string stream, redis_stream_options o);
  ~redis_stream_endpoint() override;
  redis_stream_endpoint(redis_stream_endpoint&&) noexcept;
  redis_stream_endpoint& operator=(redis_stream_endpoint&&) = delete;

  std::string_view adapter() const override { return "redis-stream"; }

  // source
  bool finite() const noexcept override { return o_.stop_when_empty; }
  task<void> run(source_context& sc) override;

  // destination
  bool synchronous() const noexcept override { return false; }
  task<void> send(exchange& ex, route_runtime& rt) override;

  /// The source's counters as now. Take a copy of the endpoint's `probe()` before moving it
  /// into a route: it reads the same counters afterwards (any thread).
  redis_stream_stats stats() const;
  std::function<redis_stream_stats()> probe() const;

  struct state;

 private:
  redis_connection* conn_;
  std::string stream_;
  redis_stream_options o_;
  std::shared_ptr<state> st_;
};

inline redis_stream_endpoint redis_stream(redis_connection& conn, std::string stream, redis_stream_options o = {}) {
  return redis_stream_endpoint(conn, std::move(stream), std::move(o));
}

}  // namespace rc
