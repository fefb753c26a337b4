// rc::redis_store (rc/redis_store.hpp): the decision script, the batching of decisions into its
// calls, and the answers.
//
// One script decides any number of decisions, of any kind, in the order given: KEYS[i] is
// decision i's key; ARGV holds, for each decision in turn, its kind and that kind's parameters.
// The reply is flat, four integers per decision. The server's clock is read once per call. Times
// go to the script in microseconds (doubles in Lua: exact up to 2^53 µs, centuries), written
// from the nanosecond durations as exact decimals; numbers go back to Redis as Lua numbers, which
// Redis writes with 17 significant digits (a double's exact round trip).
//
// Batching: decide() queues its decision and suspends; a flush, posted to the connection's
// io_context, takes what is queued (up to max_batch) into one call, as long as fewer than
// `max_calls_in_flight` calls are out. Decisions that arrive while the calls are out wait in the
// queue, and the next flush (when a call's reply comes back) takes them all. So an idle store
// sends each decision at once, alone, and a busy one sends as many per call as arrived during a
// round trip. Unbatched, every decision is sent at once, alone, pipelined on the connection.
// Every decision keeps its own deadline (asked + timeout): one whose deadline passes while it is
// queued fails with RC5011 without being sent, and a call's timeout is what is left of its oldest
// decision's.
#include "rc/redis_store.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <charconv>
#include <coroutine>
#include <deque>
#include <mutex>
#include <vector>

#include "rc/error.hpp"
#include "rc/options.hpp"

namespace rc {
namespace {

using steady = std::chrono::steady_clock;

// ARGV per decision, after its kind:
//   't' (GCRA; the key holds the theoretical arrival time, µs): interval µs, tolerance µs,
//       reserve (1/0), max_wait µs (-1: none). Answers admitted, wait µs, admit_at µs, 0.
//   'f' (fixed window; the key holds the count): window ms. Answers hits, ms until the window
//       ends, the server's time µs, 0.
//   's' (sliding window): window µs, limit. A hit in bucket i (covering [i*g, (i+1)*g),
//       g = window / 10) counts while (i+1)*g > now - window, so at most 11 buckets count, and
//       the key is a ring of 11 slots, bucket i in slot i % 11: a string of 11 pairs of
//       little-endian int64 (bucket index, hits), read with one GET and decoded by the struct
//       library in one call, written with one SETRANGE. A slot holding another bucket than the
//       one its index would hold is stale (zero). Answers hits, µs until the count drops, µs
//       until a new hit's number would be <= limit, the server's time µs.
//   'T', 'S': a decision with the parameters of the one just before it.
// A decision that raises an error (a key of another type) answers "E<message>" in its first slot:
// the script does not stop there, so the decisions before and after it, already written or not,
// keep their own answers.
// Numbers written to Redis are formatted by the script as integers ('%d'; a throttle's theoretical
// arrival time with a fraction of a µs as '%.3f'), which is exact and far cheaper for the server
// than its own 17-digit rendering of a Lua number.
// (A ring rather than a hash of buckets: a hash is read back as strings, two per bucket, each
// parsed with strtod, which cost a key with all buckets live twice the time of a fresh one.)
// The sliding key's expiry is set when a hit opens a new bucket: the newest bucket counts until
// (i+1)*g + window, which is at most g + window after its first hit.
constexpr const char* decide_script = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fmt = string.format
local RING, OFF, OFFC = {}, {}, {}
for n = 2, 22, 2 do RING[n] = '<' .. string.rep('i8', n) end
for i = 0, 10 do
  OFF[i] = tostring(16 * i)
  OFFC[i] = tostring(16 * i + 8)
end
local out = {}
local o = 0
local a = 1
local interval, tolerance, reserve, max_wait, window, limit
local function decide(key, kind)
  if kind == 't' or kind == 'T' then
    if kind == 't' then
      interval = tonumber(ARGV[a + 1])
      tolerance = tonumber(ARGV[a + 2])
      reserve = ARGV[a + 3] == '1'
      max_wait = tonumber(ARGV[a + 4])
      a = a + 5
    else
      a = a + 1
    end
    local tat = tonumber(redis.call('GET', key) or '0')
    if tat < now then tat = now end
    local wait = tat - tolerance - now
    if wait < 0 then wait = 0 end
    if wait > 0 and ((not reserve) or (max_wait >= 0 and wait > max_wait)) then
      out[o + 1] = 0
    else
      tat = tat + interval
      local px = fmt('%d', math.ceil((tat - now) / 1000) + 1)
      if tat % 1 == 0 then
        redis.call('SET', key, fmt('%d', tat), 'PX', px)
      else
        redis.call('SET', key, fmt('%.3f', tat), 'PX', px)
      end
      out[o + 1] = 1
    end
    out[o + 2] = math.ceil(wait)
    out[o + 3] = math.ceil(now + wait)
    out[o + 4] = 0
  elseif kind == 'f' then
    local window = ARGV[a + 1]
    a = a + 2
    local n = redis.call('INCR', key)
    local ttl = -1
    if n > 1 then ttl = redis.call('PTTL', key) end
    if ttl < 0 then
      redis.call('PEXPIRE', key, window)
      ttl = tonumber(window)
    end
    out[o + 1] = n
    out[o + 2] = ttl
    out[o + 3] = now
    out[o + 4] = 0
  else
    if kind == 's' then
      window = tonumber(ARGV[a + 1])
      limit = tonumber(ARGV[a + 2])
      a = a + 3
    else
      a = a + 1
    end
    local g = math.ceil(window / 10)
    local cur = math.floor(now / g)
    local oldest = math.floor((now - window) / g)
    local v = redis.call('GET', key)
    local r = {}
    if v and #v >= 16 then
      r = {struct.unpack(RING[math.min(22, 2 * math.floor(#v / 16))], v)}
      r[#r] = nil  -- unpack's last value is its position in the string
    end
    local s = cur % 11
    if r[2 * s + 1] == cur then
      r[2 * s + 2] = r[2 * s + 2] + 1
      redis.call('SETRANGE', key, OFFC[s], struct.pack('<i8', r[2 * s + 2]))
    else
      r[2 * s + 1] = cur
      r[2 * s + 2] = 1
      redis.call('SETRANGE', key, OFF[s], struct.pack('<i8i8', cur, 1))
      redis.call('PEXPIRE', key, fmt('%d', math.ceil((window + g) / 1000) + 1))
    end
    local total, first = 0, nil
    for idx = oldest, cur do
      local k = 2 * (idx % 11)
      if r[k + 1] == idx then
        total = total + r[k + 2]
        if not first then first = idx end
      end
    end
    local retry = 0
    if limit > 0 and total >= limit then
      local left = total
      for idx = oldest, cur do
        local k = 2 * (idx % 11)
        if r[k + 1] == idx then
          left = left - r[k + 2]
          if left <= limit - 1 then
            retry = (idx + 1) * g + window - now
            break
          end
        end
      end
    end
    out[o + 1] = total
    out[o + 2] = math.ceil((first + 1) * g + window - now)
    out[o + 3] = math.ceil(retry)
    out[o + 4] = now
  end
end
for i = 1, #KEYS do
  local ok, err = pcall(decide, KEYS[i], ARGV[a])
  if not ok then
    if type(err) == 'table' then err = err.err end
    out[o + 1] = 'E' .. tostring(err)
    out[o + 2] = 0
    out[o + 3] = 0
    out[o + 4] = 0
  end
  o = o + 4
end
return out
)lua";

constexpr std::size_t reply_stride = 4;
// Calls of one store out at once while batching; decisions asked meanwhile wait for the next.
constexpr int max_calls_in_flight = 2;

std::string sha1_hex(std::string_view text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), md, &len, EVP_sha1(), nullptr);
  std::string hex;
  for (unsigned i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

const std::string& script_sha() {
  static const std::string sha = sha1_hex(decide_script);
  return sha;
}

/// A duration as exact decimal microseconds ("1500", "333333.334"): no floating point.
std::string us_text(duration d) {
  long long ns = d.count();
  std::string s;
  if (ns < 0) {
    s += '-';
    ns = -ns;
  }
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, ns / 1000);
  s.append(buf, r.ptr);
  if (const long long frac = ns % 1000; frac != 0) {
    s += '.';
    s += static_cast<char>('0' + frac / 100);
    s += static_cast<char>('0' + frac / 10 % 10);
    s += static_cast<char>('0' + frac % 10);
  }
  return s;
}

duration from_us(long long us) { return std::chrono::microseconds(us); }

bool cross_slot(std::string_view err) {
  return err.rfind("CROSSSLOT", 0) == 0 || err.find("same slot") != std::string_view::npos;
}

class redis_decision_store final : public decision_store, public std::enable_shared_from_this<redis_decision_store> {
 public:
  redis_decision_store(redis_connection& conn, redis_store_options o)
      : conn_(conn), io_(conn.io()), opt_(std::move(o)) {
    if (opt_.timeout <= duration::zero())
      invalid_option("redis_store", "timeout", "a duration > 0", ms_text(opt_.timeout));
    if (opt_.on_error != store_on_error::fail_open && opt_.on_error != store_on_error::fail_closed &&
        opt_.on_error != store_on_error::local)
      invalid_option("redis_store", "on_error", "fail_open, fail_closed or local", static_cast<int>(opt_.on_error));
    if (opt_.batch != redis_batching::automatic && opt_.batch != redis_batching::on &&
        opt_.batch != redis_batching::off)
      invalid_option("redis_store", "batch", "automatic, on or off", static_cast<int>(opt_.batch));
    if (opt_.max_batch < 1) invalid_option("redis_store", "max_batch", "at least 1", opt_.max_batch);
    mode_.store(opt_.batch == redis_batching::on    ? mode::on
                : opt_.batch == redis_batching::off ? mode::off
                                                    : mode::unknown,
                std::memory_order_relaxed);
  }

  store_on_error on_error() const noexcept override { return opt_.on_error; }
  std::string_view name() const noexcept override { return "redis"; }

  task<store_answer> decide(const store_query& q) override {
    decision d;
    d.what = q.what;
    d.key.reserve(opt_.prefix.size() + q.key.size() + 6);
    d.key += '{';
    d.key += opt_.prefix;
    d.key += ':';
    d.key += q.key;
    d.key += '}';
    switch (q.what) {
      case store_query::kind::throttle:
        d.key += ":tb";
        d.args = {"t", us_text(q.interval), us_text(q.tolerance), q.reserve ? "1" : "0",
                  q.max_wait ? us_text(*q.max_wait) : std::string("-1")};
        break;
      case store_query::kind::fixed_window:
        d.key += ":fw";
        d.args = {"f", std::to_string(
                           std::max<long long>(1, std::chrono::ceil<std::chrono::milliseconds>(q.window).count()))};
        break;
      case store_query::kind::sliding_window:
        d.key += ":sr";
        d.args = {
            "s", std::to_string(std::max<long long>(1, std::chrono::ceil<std::chrono::microseconds>(q.window).count())),
            std::to_string(q.limit)};
        break;
    }
    d.deadline = steady::now() + std::chrono::duration_cast<steady::duration>(opt_.timeout);
    // A named awaiter, not a temporary: GCC 12 mishandles temporaries of aggregate type with
    // reference members in a co_await.
    submit_awaiter submitted{*this, d};
    co_await submitted;
    if (d.failure) std::rethrow_exception(d.failure);
    co_return d.answer;
  }

 private:
  enum class mode : std::uint8_t { unknown, probing, on, off };

  // One decision, in its decide() frame while it is suspended.
  struct decision {
    store_query::kind what{};
    std::string key;
    std::vector<std::string> args;
    steady::time_point deadline;
    std::coroutine_handle<> resume;
    store_answer answer;
    std::exception_ptr failure;
  };
  using batch = std::vector<decision*>;

  struct submit_awaiter {
    redis_decision_store& store;
    decision& d;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) {
      d.resume = h;
      store.submit(&d);
    }
    void await_resume() const noexcept {}
  };

  bool batching() {
    switch (mode_.load(std::memory_order_acquire)) {
      case mode::on:
        return true;
      case mode::unknown:
        probe();
        return false;
      default:
        return false;
    }
  }

  bool is_closed() {
    std::lock_guard lock(mutex_);
    return closed_;
  }

  // Asks the server once whether it is a cluster member; until it answers, decisions go alone.
  void probe() {
    if (is_closed()) return;
    mode expected = mode::unknown;
    if (!mode_.compare_exchange_strong(expected, mode::probing)) return;
    auto self = shared_from_this();
    conn_.command({"INFO", "cluster"}, opt_.timeout, [self](std::error_code ec, redis_reply r) {
      mode m = mode::off;
      if (ec)
        m = mode::unknown;  // ask again with the next decision
      else if (r.is_string())
        m = r.str.find("cluster_enabled:1") == std::string::npos ? mode::on : mode::off;
      mode expected = mode::probing;
      self->mode_.compare_exchange_strong(expected, m);
    });
  }

  void submit(decision* d) {
    if (!batching()) {
      send(batch{d}, false);
      return;
    }
    bool post = false;
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(d);
      if (!flush_posted_ && in_flight_ < max_calls_in_flight) post = flush_posted_ = true;
    }
    if (post) boost::asio::post(io_, [self = shared_from_this()] { self->flush(true); });
  }

  // Sends what is queued, while calls may go out. `posted`: run from the posted flush.
  void flush(bool posted) {
    for (;;) {
      batch b;
      bool closed = false;
      {
        std::lock_guard lock(mutex_);
        if (posted) flush_posted_ = false;
        posted = false;
        if (queue_.empty() || in_flight_ >= max_calls_in_flight) return;
        closed = closed_;
        const std::size_t n = closed ? queue_.size() : std::min(queue_.size(), opt_.max_batch);
        b.assign(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
        queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
        if (!closed) ++in_flight_;
      }
      if (closed) {
        for (auto* d : b) {
          d->failure = redis_failure(redis_errc::closed, "redis EVALSHA");
          finish(d);
        }
        return;
      }
      drop_expired(b);
      if (!b.empty()) return send(std::move(b), true);
      std::lock_guard lock(mutex_);
      --in_flight_;
    }
  }

  // Fails (RC5011) the decisions whose deadline passed while they were queued.
  void drop_expired(batch& b) {
    const auto now = steady::now();
    auto live = std::stable_partition(b.begin(), b.end(), [&](decision* d) { return d->deadline > now; });
    for (auto it = live; it != b.end(); ++it) {
      (*it)->failure = redis_failure(redis_errc::timeout, "redis EVALSHA");
      finish(*it);
    }
    b.erase(live, b.end());
  }

  // One call for `b` (in order). `counted`: it holds a place among the calls in flight.
  void send(batch b, bool counted, bool eval = false) {
    if (is_closed()) {  // the connection may be gone: nothing more may be sent on it
      for (auto* d : b) d->failure = redis_failure(redis_errc::closed, "redis EVALSHA");
      return done(b, counted);
    }
    auto deadline = steady::time_point::max();
    for (auto* d : b) deadline = std::min(deadline, d->deadline);
    const duration left = std::chrono::duration_cast<duration>(deadline - steady::now());
    if (left <= duration::zero()) {
      for (auto* d : b)
        d->failure = eval ? std::make_exception_ptr(error(errc::timed_out,
                                                          "redis_store: no time left to resend a script the server "
                                                          "forgot",
                                                          true))
                          : redis_failure(redis_errc::timeout, "redis EVALSHA");
      return done(b, counted);
    }
    std::vector<std::string> args;
    std::size_t argc = 3 + b.size();
    for (auto* d : b) argc += d->args.size();
    args.reserve(argc);
    args.emplace_back(eval ? "EVAL" : "EVALSHA");
    args.emplace_back(eval ? std::string(decide_script) : script_sha());
    args.push_back(std::to_string(b.size()));
    for (auto* d : b) args.push_back(d->key);
    // A throttle or sliding decision with the same parameters as the one before it sends only its
    // kind, upper-cased ("T", "S"): the script keeps the last parameters it read.
    const decision* prev = nullptr;
    for (auto* d : b) {
      if (prev != nullptr && d->what != store_query::kind::fixed_window && prev->args == d->args) {
        args.emplace_back(d->what == store_query::kind::throttle ? "T" : "S");
      } else {
        for (const auto& a : d->args) args.push_back(a);
      }
      prev = d;
    }
    auto self = shared_from_this();
    conn_.command(std::move(args), left, [self, b = std::move(b), counted, eval](std::error_code ec, redis_reply r) {
      self->on_reply(b, counted, eval, ec, std::move(r));
    });
  }

  void on_reply(const batch& b, bool counted, bool eval, std::error_code ec, redis_reply r) {
    if (ec == redis_errc::closed) {
      // The connection is closed (perhaps destroyed): nothing more may be sent on it.
      std::lock_guard lock(mutex_);
      closed_ = true;
    }
    if (ec) {
      for (auto* d : b) d->failure = redis_failure(ec, eval ? "redis EVAL" : "redis EVALSHA");
      return done(b, counted);
    }
    if (r.is_error() && !eval && r.str.rfind("NOSCRIPT", 0) == 0)
      return send(b, counted, true);  // the server lost its script cache: the script itself, in the time left
    if (r.is_error() && b.size() > 1 && cross_slot(r.str)) {
      // A cluster (or a proxy) refuses keys of several slots in one call: decide alone from now on.
      mode_.store(mode::off, std::memory_order_release);
      for (auto* d : b) send(batch{d}, false);  // before anything queued behind them
      if (counted) release_call();
      return;
    }
    if (r.is_error()) {
      for (auto* d : b)
        d->failure = std::make_exception_ptr(
            error(errc::connection_failed, "redis_store: the server refused the script: " + r.str, true));
      return done(b, counted);
    }
    if (!r.is_array() || r.elements.size() != reply_stride * b.size()) {
      for (auto* d : b)
        d->failure = std::make_exception_ptr(
            error(errc::connection_failed, "redis_store: unexpected reply to a decision script", true));
      return done(b, counted);
    }
    for (std::size_t i = 0; i < b.size(); ++i) {
      try {
        b[i]->answer = answer_of(b[i]->what, &r.elements[i * reply_stride]);
      } catch (...) {
        b[i]->failure = std::current_exception();
      }
    }
    done(b, counted);
  }

  static store_answer answer_of(store_query::kind what, const redis_reply* e) {
    if (e[0].is_string())  // this decision's own error (a key of another type): the others stand
      throw error(errc::connection_failed, "redis_store: the server refused the decision: " + e[0].str.substr(1), true);
    store_answer a;
    switch (what) {
      case store_query::kind::throttle:
        a.admitted = e[0].as_integer() == 1;
        a.wait = from_us(e[1].as_integer());
        a.admit_at_us = e[2].as_integer();
        break;
      case store_query::kind::fixed_window:
        a.hits = static_cast<std::uint64_t>(e[0].as_integer());
        a.reset = std::chrono::milliseconds(e[1].as_integer());
        a.retry_after = a.reset;
        a.admit_at_us = e[2].as_integer();
        break;
      case store_query::kind::sliding_window:
        a.hits = static_cast<std::uint64_t>(e[0].as_integer());
        a.reset = from_us(e[1].as_integer());
        a.retry_after = from_us(e[2].as_integer());
        a.admit_at_us = e[3].as_integer();
        break;
    }
    return a;
  }

  // Frees the call's place (sending what waited for it), then resumes the batch's deciders.
  void done(const batch& b, bool counted) {
    if (counted) release_call();
    for (auto* d : b) finish(d);
  }

  void release_call() {
    std::deque<decision*> orphans;
    {
      std::lock_guard lock(mutex_);
      --in_flight_;
      if (closed_)
        orphans.swap(queue_);
      else if (queue_.empty() || flush_posted_)
        return;
    }
    if (orphans.empty()) return flush(false);
    for (auto* d : orphans) {
      d->failure = redis_failure(redis_errc::closed, "redis EVALSHA");
      finish(d);
    }
  }

  // Resumes the decider on the io_context, never inside the connection's reply handling.
  void finish(decision* d) {
    boost::asio::post(io_, [h = d->resume] { h.resume(); });
  }

  redis_connection& conn_;
  boost::asio::io_context& io_;
  redis_store_options opt_;
  std::atomic<mode> mode_{mode::unknown};
  std::mutex mutex_;
  std::deque<decision*> queue_;  // asked, not yet sent, in order
  int in_flight_ = 0;            // batched calls sent, not yet answered
  bool flush_posted_ = false;
  bool closed_ = false;  // the connection answered `closed`: queued decisions fail, none is sent
};

}  // namespace

std::shared_ptr<decision_store> redis_store(redis_connection& conn, redis_store_options options) {
  return std::make_shared<redis_decision_store>(conn, std::move(options));
}

}  // namespace rc
