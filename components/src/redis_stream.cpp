#include "rc/redis_stream.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <iterator>
#include <mutex>
#include <random>
#include <unordered_set>

#include "process_name.hpp"
#include "rc/context.hpp"
#include "rc/error.hpp"
#include "redis_argv.hpp"

namespace rc {

namespace {

constexpr std::string_view op = "redis_stream";

using detail::redis_argv;

// Moves an entry to the dead-letter stream and acknowledges it, atomically, and only while it is
// still pending on this consumer (another consumer that claimed it meanwhile owns it now).
// KEYS: stream, dead-letter stream. ARGV: group, id, consumer, field, value, ...
constexpr const char* dead_letter_script = R"lua(
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 or p[1][2] ~= ARGV[3] then return 0 end
redis.call('XADD', KEYS[2], '*', unpack(ARGV, 4))
return redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
)lua";

long long whole_ms(duration d) { return std::chrono::ceil<std::chrono::milliseconds>(d).count(); }

struct entry {
  std::string id;
  redis_fields fields;
  std::uint64_t deliveries = 1;
};

/// [id, [field, value, ...]] -> entry. A nil field list (an entry deleted while pending) gives none.
std::optional<entry> parse_entry(const redis_reply& r) {
  if (!r.is_array() || r.elements.size() < 2 || !r.elements[1].is_array()) return std::nullopt;
  entry e;
  e.id = r.elements[0].str;
  const auto& kv = r.elements[1].elements;
  for (std::size_t i = 0; i + 1 < kv.size(); i += 2) e.fields.emplace_back(kv[i].str, kv[i + 1].str);
  return e;
}

std::vector<entry> parse_entries(const redis_reply& list) {
  std::vector<entry> out;
  if (!list.is_array()) return out;
  out.reserve(list.elements.size());
  for (const auto& r : list.elements)
    if (auto e = parse_entry(r)) out.push_back(std::move(*e));
  return out;
}

}  // namespace

void redis_stream_options::validate() const {
  if (max_in_flight < 1 || max_in_flight > 100'000)
    invalid_option(op, "max_in_flight", "an integer in [1, 100000]", max_in_flight);
  if (block < std::chrono::milliseconds(1) || block > std::chrono::seconds(60))
    invalid_option(op, "block", "a duration in [1ms, 60s]", ms_text(block));
  if (max_deliveries < 1 || max_deliveries > 1000)
    invalid_option(op, "max_deliveries", "an integer in [1, 1000]", max_deliveries);
  if (min_idle < std::chrono::milliseconds(1)) invalid_option(op, "min_idle", "a duration >= 1ms", ms_text(min_idle));
  if (claim_interval < duration::zero())
    invalid_option(op, "claim_interval", "a duration >= 0", ms_text(claim_interval));
  if (retry_delay < duration::zero()) invalid_option(op, "retry_delay", "a duration >= 0", ms_text(retry_delay));
  if (group.empty()) invalid_option(op, "group", "a non-empty name", "\"\"");
  if (start != "0" && start != "$") invalid_option(op, "start", "\"0\" or \"$\"", start);
}

struct redis_stream_endpoint::state {
  struct counters {
    std::atomic<std::uint64_t> delivered{0}, acked{0}, ack_missed{0}, retried{0}, dead{0}, claimed{0}, peak{0};
  } n;

  std::mutex mutex;
  std::size_t in_flight = 0;             // entries held (read, not finished)
  std::unordered_set<std::string> held;  // their ids
  timer_wait* waiter = nullptr;          // the reading loop, waiting for room
  scheduler* clock = nullptr;

  redis_stream_stats snapshot() const {
    return {n.delivered.load(), n.acked.load(),   n.ack_missed.load(), n.retried.load(),
            n.dead.load(),      n.claimed.load(), n.peak.load()};
  }

  /// Takes a slot for `id`; false when it is already held here.
  bool hold(const std::string& id) {
    std::lock_guard lock(mutex);
    if (!held.insert(id).second) return false;
    ++in_flight;
    if (in_flight > n.peak.load(std::memory_order_relaxed)) n.peak.store(in_flight, std::memory_order_relaxed);
    return true;
  }
  void release(const std::string& id) {
    std::lock_guard lock(mutex);
    held.erase(id);
    --in_flight;
    if (waiter) {
      clock->reschedule(*waiter, clock->now());
      waiter = nullptr;
    }
  }
  std::size_t room(std::size_t max) {
    std::lock_guard lock(mutex);
    return in_flight >= max ? 0 : max - in_flight;
  }
};

redis_stream_endpoint::redis_stream_endpoint(redis_connection& conn, std::string stream, redis_stream_options o)
    : conn_(&conn), stream_(std::move(stream)), o_(std::move(o)), st_(std::make_shared<state>()) {
  if (stream_.empty()) invalid_option(op, "stream", "a non-empty name", "\"\"");
  o_.validate();
  if (o_.dead_letter.empty()) o_.dead_letter = stream_ + ":dead";
  if (o_.claim_interval == duration::zero())
    o_.claim_interval = std::max<duration>(o_.min_idle / 2, std::chrono::milliseconds(1));
}
redis_stream_endpoint::~redis_stream_endpoint() = default;
redis_stream_endpoint::redis_stream_endpoint(redis_stream_endpoint&&) noexcept = default;

redis_stream_stats redis_stream_endpoint::stats() const { return st_->snapshot(); }
std::function<redis_stream_stats()> redis_stream_endpoint::probe() const {
  return [st = st_] { return st->snapshot(); };
}

// ---- destination -------------------------------------------------------------------------

task<void> redis_stream_endpoint::send(exchange& ex, route_runtime&) {
  std::vector<std::string> args{"XADD", stream_};
  if (o_.max_len > 0) {
    args.emplace_back("MAXLEN");
    args.emplace_back("~");
    args.push_back(std::to_string(o_.max_len));
  }
  args.emplace_back("*");
  if (o_.fields) {
    for (auto& [k, v] : o_.fields(ex)) {
      args.push_back(std::move(k));
      args.push_back(std::move(v));
    }
  } else {
    const any_body& b = ex.raw_body();
    if (b.holds<std::string>()) {
      args.emplace_back("body");
      args.push_back(b.get<std::string>());
    } else if (b.has_value()) {
      if (!b.converts_to_json())
        throw error(errc::misconfigured,
                    fmt::format("redis_stream(\"{}\"): the body type ({}) has no JSON form; give redis_stream({{ "
                                "fields }}) a function writing the entry's fields",
                                stream_, b.type().name()),
                    false);
      args.emplace_back("body");
      args.push_back(b.to_json().dump());
    }
    if (o_.headers && !ex.headers().empty()) {
      args.emplace_back("headers");
      args.push_back(ex.headers().to_json().dump());
    }
  }
  if (args.back() == "*") {
    // XADD needs at least one field: an empty body without headers is an entry with an empty body.
    args.emplace_back("body");
    args.emplace_back();
  }
  redis_reply r = co_await conn_->command(std::move(args));
  if (r.is_error())
    throw error(errc::step_failed, fmt::format("redis_stream(\"{}\"): XADD failed: {}", stream_, r.str), true);
}

// ---- source ------------------------------------------------------------------------------

namespace {

/// One running source: its route, connections and names.
struct reader {
  source_context& sc;
  route_runtime& rt;
  redis_connection& conn;                      // acks, claims, dead letters
  std::shared_ptr<redis_connection> blocking;  // XREADGROUP BLOCK only
  const std::string& stream;
  const redis_stream_options& o;
  std::string consumer;
  std::shared_ptr<redis_stream_endpoint::state> st;

  void report(std::string_view what, const std::exception_ptr& e) {
    rt.events().emit(redis_stream_error, [&] {
      return nlohmann::json{{"routeId", rt.id()},   {"stream", stream},  {"group", o.group},
                            {"consumer", consumer}, {"operation", what}, {"error", error_json(e, false)}};
    });
  }

  /// A command on the shared connection; an error reply throws.
  task<redis_reply> call(std::vector<std::string> args) {
    const std::string name = args.front();
    redis_reply r = co_await conn.command(std::move(args));
    if (r.is_error())
      throw error(errc::step_failed, fmt::format("redis_stream(\"{}\"): {} failed: {}", stream, name, r.str), true);
    co_return r;
  }

  exchange make_exchange(const entry& e) {
    std::string body;
    std::vector<std::pair<std::string, nlohmann::json>> headers;
    for (const auto& [k, v] : e.fields) {
      if (k == "body") {
        body = v;
      } else if (k == "headers") {
        nlohmann::json h = nlohmann::json::parse(v, nullptr, false);
        if (h.is_object()) {
          for (auto& [hk, hv] : h.items()) headers.emplace_back(hk, hv);
        } else {
          headers.emplace_back(std::string(redis_stream_headers::field_prefix) + k, v);
        }
      } else {
        headers.emplace_back(std::string(redis_stream_headers::field_prefix) + k, v);
      }
    }
    exchange ex = sc.make(std::move(body));
    for (auto& [k, v] : headers) ex.set_header(k, std::move(v));
    ex.set_header(redis_stream_headers::stream, stream);
    ex.set_header(redis_stream_headers::entry_id, e.id);
    ex.set_header(redis_stream_headers::delivery_count, e.deliveries);
    return ex;
  }

  task<void> ack(const entry& e) {
    auto xack = redis_argv("XACK", stream, o.group, e.id);
    redis_reply r = co_await call(std::move(xack));
    if (r.integer > 0)
      st->n.acked.fetch_add(1, std::memory_order_relaxed);
    else
      st->n.ack_missed.fetch_add(1, std::memory_order_relaxed);
  }

  task<void> dead_letter(const entry& e, const std::string& why) {
    std::vector<std::string> args{"EVAL", dead_letter_script, "2", stream, o.dead_letter, o.group, e.id, consumer};
    for (const auto& [k, v] : e.fields) {
      args.push_back(k);
      args.push_back(v);
    }
    for (auto [k, v] : {std::pair<const char*, std::string>{"error", why},
                        {"stream", stream},
                        {"entryId", e.id},
                        {"deliveries", std::to_string(e.deliveries)}}) {
      args.emplace_back(k);
      args.push_back(std::move(v));
    }
    redis_reply r = co_await call(std::move(args));
    if (r.integer <= 0) co_return;  // no longer ours: its new owner decides
    st->n.dead.fetch_add(1, std::memory_order_relaxed);
    rt.events().emit(redis_stream_dead, [&] {
      return nlohmann::json{{"routeId", rt.id()},          {"stream", stream}, {"group", o.group},
                            {"consumer", consumer},        {"entryId", e.id},  {"deliveries", e.deliveries},
                            {"deadLetter", o.dead_letter}, {"error", why}};
    });
  }

  /// Runs one entry until it is acknowledged, dead-lettered or taken by another consumer. Holds
  /// its slot throughout (released by the caller).
  task<void> process(entry e) {
    for (;;) {
      if (e.deliveries > o.max_deliveries) {
        const std::string why =
            fmt::format("delivered {} times, more than max_deliveries ({})", e.deliveries, o.max_deliveries);
        co_await dead_letter(e, why);
        co_return;
      }
      st->n.delivered.fetch_add(1, std::memory_order_relaxed);
      run_result r = co_await sc.emit(make_exchange(e));
      if (!r.result.is_fail()) {
        co_await ack(e);
        co_return;
      }
      if (e.deliveries >= o.max_deliveries) {
        const std::string why = message_of(r.result.error);
        co_await dead_letter(e, why);
        co_return;
      }
      if (o.retry_delay > duration::zero()) (void)co_await rt.clock().wait_until(rt.now() + o.retry_delay);
      // Claim it back (a new delivery, counted by Redis) unless another consumer has it now.
      auto claim_back = redis_argv("XCLAIM", stream, o.group, consumer, std::to_string(whole_ms(o.retry_delay)), e.id);
      redis_reply c = co_await call(std::move(claim_back));
      auto again = parse_entries(c);
      if (again.empty()) co_return;  // acknowledged, deleted or claimed elsewhere
      st->n.retried.fetch_add(1, std::memory_order_relaxed);
      again.front().deliveries = e.deliveries + 1;
      e = std::move(again.front());
    }
  }

  void start(entry e) {
    if (!st->hold(e.id)) return;  // already running here (claimed back while its run is slow)
    // The reader outlives every run it starts (run() waits for them), but the state is what a
    // finishing run touches last, so the run holds it itself.
    rc::spawn(rt.frames(), [this, st = st, e = std::move(e)]() mutable -> task<void> {
      const std::string id = e.id;
      try {
        co_await process(std::move(e));
      } catch (...) {
        // Left pending: a retry on this consumer or a claim after min_idle runs it again.
        report("process", std::current_exception());
      }
      st->release(id);
    });
  }

  /// Waits until at least one slot is free (false: intake closed), or until nothing is held
  /// (`all`, on the way out, not cut short by intake).
  task<bool> wait_room(bool all) {
    for (;;) {
      auto w = all ? rt.clock().wait_queued() : rt.clock().wait_queued(&rt.intake());
      {
        std::lock_guard lock(st->mutex);
        if (all ? st->in_flight == 0 : st->in_flight < o.max_in_flight) co_return true;
        st->waiter = &w.node;
      }
      (void)co_await w.by_ref();
      {
        std::lock_guard lock(st->mutex);
        if (st->waiter == &w.node) st->waiter = nullptr;
      }
      if (!all && rt.intake().fired()) co_return false;
    }
  }

  task<void> create_group() {
    auto create = redis_argv("XGROUP", "CREATE", stream, o.group, o.start, "MKSTREAM");
    redis_reply r = co_await conn.command(std::move(create));
    if (r.is_error() && r.str.rfind("BUSYGROUP", 0) != 0)
      throw error(errc::step_failed, fmt::format("redis_stream(\"{}\"): XGROUP CREATE failed: {}", stream, r.str),
                  true);
  }

  /// XAUTOCLAIM entries idle for min_idle, up to `room`; returns the next cursor ("0-0": a cycle
  /// through the pending list is complete).
  task<std::string> claim(const std::string& cursor, std::size_t room) {
    auto autoclaim = redis_argv("XAUTOCLAIM", stream, o.group, consumer, std::to_string(whole_ms(o.min_idle)), cursor,
                                "COUNT", std::to_string(room));
    redis_reply r = co_await call(std::move(autoclaim));
    if (!r.is_array() || r.elements.size() < 2) co_return "0-0";
    std::string next = r.elements[0].str;
    auto entries = parse_entries(r.elements[1]);
    if (entries.empty()) co_return next;
    // Their delivery counts (XAUTOCLAIM counted this delivery): one XPENDING over the claimed range.
    const auto [lo, hi] = std::minmax_element(entries.begin(), entries.end(),
                                              [](const entry& a, const entry& b) { return id_less(a.id, b.id); });
    auto counts =
        redis_argv("XPENDING", stream, o.group, lo->id, hi->id, std::to_string(entries.size() * 2 + 16), consumer);
    redis_reply p = co_await call(std::move(counts));
    for (auto& e : entries)
      for (const auto& row : p.elements)
        if (row.is_array() && row.elements.size() >= 4 && row.elements[0].str == e.id)
          e.deliveries = static_cast<std::uint64_t>(row.elements[3].integer);
    st->n.claimed.fetch_add(entries.size(), std::memory_order_relaxed);
    rt.events().emit(redis_stream_claimed, [&] {
      nlohmann::json ids = nlohmann::json::array();
      for (const auto& e : entries) ids.push_back(e.id);
      return nlohmann::json{
          {"routeId", rt.id()}, {"stream", stream}, {"group", o.group}, {"consumer", consumer}, {"entryIds", ids}};
    });
    for (auto& e : entries) start(std::move(e));
    co_return next;
  }

  static bool id_less(const std::string& a, const std::string& b) {
    auto split = [](const std::string& s) {
      const auto dash = s.find('-');
      return std::pair{std::stoull(s.substr(0, dash)),
                       dash == std::string::npos ? 0ULL : std::stoull(s.substr(dash + 1))};
    };
    return split(a) < split(b);
  }

  /// Pending entries in the group (all consumers).
  task<long long> group_pending() {
    auto summary = redis_argv("XPENDING", stream, o.group);
    redis_reply r = co_await call(std::move(summary));
    co_return r.is_array() && !r.elements.empty() ? r.elements[0].integer : 0;
  }

  task<void> run() {
    duration backoff = std::chrono::milliseconds(50);
    auto failed = [&](std::string_view what, std::exception_ptr e) -> task<bool> {
      report(what, e);
      (void)co_await sc.sleep_until(rt.now() + backoff);
      backoff = std::min<duration>(backoff * 2, std::chrono::seconds(2));
      co_return !sc.stopping();
    };

    // The group first (retrying while Redis is away).
    while (!sc.stopping()) {
      std::exception_ptr err;
      try {
        co_await create_group();
        break;
      } catch (...) {
        err = std::current_exception();
      }
      if (!co_await failed("XGROUP CREATE", err)) break;
    }

    time_point next_claim = rt.now();  // at once: a restarted instance finds its orphans early
    std::string cursor = "0-0";
    const duration read_timeout = o.block + blocking->options().command_timeout;
    while (!sc.stopping()) {
      if (!co_await wait_room(false)) break;
      const std::size_t room = st->room(o.max_in_flight);
      if (room == 0) continue;
      std::exception_ptr err;
      std::string what;
      try {
        if (rt.now() >= next_claim) {
          what = "XAUTOCLAIM";
          cursor = co_await claim(cursor, room);
          if (cursor == "0-0") next_claim = rt.now() + o.claim_interval;
          continue;  // room changed
        }
        what = "XREADGROUP";
        // Block no longer than until the next claim is due.
        const long long block_ms = std::min(whole_ms(o.block), std::max<long long>(1, whole_ms(next_claim - rt.now())));
        auto read = redis_argv("XREADGROUP", "GROUP", o.group, consumer, "COUNT", std::to_string(room), "BLOCK",
                               std::to_string(block_ms), "STREAMS", stream, ">");
        redis_reply r = co_await blocking->command(std::move(read), read_timeout);
        if (r.is_error())
          throw error(errc::step_failed, fmt::format("redis_stream(\"{}\"): XREADGROUP failed: {}", stream, r.str),
                      true);
        std::vector<entry> got;
        if (r.is_array())
          for (const auto& s : r.elements)
            if (s.is_array() && s.elements.size() >= 2) {
              auto part = parse_entries(s.elements[1]);
              std::move(part.begin(), part.end(), std::back_inserter(got));
            }
        backoff = std::chrono::milliseconds(50);
        if (got.empty()) {
          if (!o.stop_when_empty) continue;
          bool idle;
          {
            std::lock_guard lock(st->mutex);
            idle = st->in_flight == 0;
          }
          if (idle && co_await group_pending() == 0) break;
          continue;
        }
        for (auto& e : got) start(std::move(e));
      } catch (...) {
        err = std::current_exception();
      }
      if (err) {
        if (sc.stopping()) break;
        // A bad reply type from a server that lost our group (FLUSHALL, a failover): recreate it.
        if (message_of(err).find("NOGROUP") != std::string::npos) {
          try {
            co_await create_group();
            continue;
          } catch (...) {
            err = std::current_exception();
          }
        }
        if (!co_await failed(what, err)) break;
      }
    }
    (void)co_await wait_room(true);  // every run held here ends (and acknowledges) first
  }
};

}  // namespace

task<void> redis_stream_endpoint::run(source_context& sc) {
  route_runtime& rt = sc.route();
  {
    std::lock_guard lock(st_->mutex);
    st_->clock = &rt.clock();
  }
  auto blocking = std::make_shared<redis_connection>(rt.ctx(), conn_->options());
  // Stop must not wait for a read blocked on the server: closing its connection ends it at once.
  rt.intake().on_fire([weak = std::weak_ptr<redis_connection>(blocking)] {
    if (auto b = weak.lock()) b->close();
  });
  reader r{sc, rt, *conn_, blocking, stream_, o_, o_.consumer.empty() ? detail::unique_process_name() : o_.consumer,
           st_};
  co_await r.run();
  blocking->close();
}

}  // namespace rc
