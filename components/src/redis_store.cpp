// rc::redis_store (rc/redis_store.hpp): the three decision scripts and the decide() that runs them.
//
// Times go to the scripts in microseconds (doubles in Lua: exact up to 2^53 µs, centuries) and the
// scripts read the server's clock, so every instance decides on one clock whatever its own says.
#include "rc/redis_store.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <cmath>

#include "rc/error.hpp"
#include "rc/options.hpp"

namespace rc {
namespace {

// GCRA. KEYS[1]: the theoretical arrival time (µs). ARGV: interval µs, tolerance µs, reserve (1/0),
// max_wait µs (-1: none). Answers {admitted, wait µs, admit_at µs}.
constexpr const char* gcra_script = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local reserve = ARGV[3] == '1'
local max_wait = tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local wait = tat - tolerance - now
if wait < 0 then wait = 0 end
if wait > 0 and ((not reserve) or (max_wait >= 0 and wait > max_wait)) then
  return {0, math.ceil(wait), math.ceil(now + wait)}
end
tat = tat + interval
redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX', math.ceil((tat - now) / 1000) + 1)
return {1, math.ceil(wait), math.ceil(now + wait)}
)lua";

// Fixed window. KEYS[1]: the count. ARGV: window ms. Answers {hits, ms until the window ends,
// the server's time µs}.
constexpr const char* fixed_script = R"lua(
local t = redis.call('TIME')
local n = redis.call('INCR', KEYS[1])
local ttl = -1
if n > 1 then ttl = redis.call('PTTL', KEYS[1]) end
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {n, ttl, tonumber(t[1]) * 1000000 + tonumber(t[2])}
)lua";

// Sliding window in buckets. KEYS[1]: a hash, bucket index -> hits. ARGV: window µs, buckets,
// limit. A hit in bucket i (covering [i*g, (i+1)*g)) counts while (i+1)*g > now - window.
// Answers {hits, µs until the count drops, µs until a new hit's number would be <= limit, the
// server's time µs}.
constexpr const char* sliding_script = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[1])
local g = math.ceil(window / tonumber(ARGV[2]))
local limit = tonumber(ARGV[3])
local cur = math.floor(now / g)
local oldest = math.floor((now - window) / g)
redis.call('HINCRBY', KEYS[1], string.format('%.0f', cur), 1)
local all = redis.call('HGETALL', KEYS[1])
local b = {}
local total = 0
for i = 1, #all, 2 do
  local idx = tonumber(all[i])
  if idx < oldest then
    redis.call('HDEL', KEYS[1], all[i])
  else
    local c = tonumber(all[i + 1])
    total = total + c
    b[#b + 1] = {idx, c}
  end
end
table.sort(b, function(x, y) return x[1] < y[1] end)
redis.call('PEXPIRE', KEYS[1], math.ceil((window + g) / 1000) + 1)
local reset = (b[1][1] + 1) * g + window - now
local retry = 0
if limit > 0 and total >= limit then
  local left = total
  for i = 1, #b do
    left = left - b[i][2]
    if left <= limit - 1 then
      retry = (b[i][1] + 1) * g + window - now
      break
    end
  end
end
return {total, math.ceil(reset), math.ceil(retry), now}
)lua";

constexpr int sliding_buckets = 10;

std::string sha1_hex(std::string_view text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), md, &len, EVP_sha1(), nullptr);
  std::string hex;
  for (unsigned i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

struct script {
  std::string text;
  std::string sha;
  explicit script(const char* t) : text(t), sha(sha1_hex(text)) {}
};

const script& gcra() {
  static const script s(gcra_script);
  return s;
}
const script& fixed() {
  static const script s(fixed_script);
  return s;
}
const script& sliding() {
  static const script s(sliding_script);
  return s;
}

double to_us(duration d) { return std::chrono::duration<double, std::micro>(d).count(); }
duration from_us(long long us) { return std::chrono::microseconds(us); }

class redis_decision_store final : public decision_store {
 public:
  redis_decision_store(redis_connection& conn, redis_store_options o) : conn_(conn), opt_(std::move(o)) {
    if (opt_.timeout <= duration::zero())
      invalid_option("redis_store", "timeout", "a duration > 0", ms_text(opt_.timeout));
    if (opt_.on_error != store_on_error::fail_open && opt_.on_error != store_on_error::fail_closed &&
        opt_.on_error != store_on_error::local)
      invalid_option("redis_store", "on_error", "fail_open, fail_closed or local", static_cast<int>(opt_.on_error));
  }

  store_on_error on_error() const noexcept override { return opt_.on_error; }
  std::string_view name() const noexcept override { return "redis"; }

  task<store_answer> decide(const store_query& q) override {
    const script* s = nullptr;
    std::vector<std::string> args;
    args.reserve(8);
    args.emplace_back("EVALSHA");
    args.emplace_back();
    args.emplace_back("1");
    std::string key = "{" + opt_.prefix + ":" + std::string(q.key) + "}";
    switch (q.what) {
      case store_query::kind::throttle:
        s = &gcra();
        args.push_back(key + ":tb");
        args.push_back(fmt::format("{:.3f}", to_us(q.interval)));
        args.push_back(fmt::format("{:.3f}", to_us(q.tolerance)));
        args.emplace_back(q.reserve ? "1" : "0");
        args.push_back(q.max_wait ? fmt::format("{:.3f}", to_us(*q.max_wait)) : std::string("-1"));
        break;
      case store_query::kind::fixed_window:
        s = &fixed();
        args.push_back(key + ":fw");
        args.push_back(
            std::to_string(std::max<long long>(1, std::chrono::ceil<std::chrono::milliseconds>(q.window).count())));
        break;
      case store_query::kind::sliding_window:
        s = &sliding();
        args.push_back(key + ":sw");
        args.push_back(fmt::format("{:.0f}", std::max(1.0, std::ceil(to_us(q.window)))));
        args.push_back(std::to_string(sliding_buckets));
        args.push_back(std::to_string(q.limit));
        break;
    }
    args[1] = s->sha;
    const auto started = std::chrono::steady_clock::now();
    redis_reply r = co_await conn_.command(args, opt_.timeout);
    if (r.is_error() && r.str.rfind("NOSCRIPT", 0) == 0) {
      // The server lost its script cache: send the script itself, within what is left of the timeout.
      const duration left = opt_.timeout - (std::chrono::steady_clock::now() - started);
      if (left <= duration::zero())
        throw error(errc::timed_out, "redis_store: no time left to resend a script the server forgot", true);
      args[0] = "EVAL";
      args[1] = s->text;
      r = co_await conn_.command(std::move(args), left);
    }
    if (r.is_error())
      throw error(errc::connection_failed, "redis_store: the server refused the script: " + r.str, true);
    if (!r.is_array() || r.elements.size() < 2)
      throw error(errc::connection_failed, "redis_store: unexpected reply to a decision script", true);
    store_answer a;
    switch (q.what) {
      case store_query::kind::throttle:
        a.admitted = r.elements[0].as_integer() == 1;
        a.wait = from_us(r.elements[1].as_integer());
        if (r.elements.size() > 2) a.admit_at_us = r.elements[2].as_integer();
        break;
      case store_query::kind::fixed_window:
        a.hits = static_cast<std::uint64_t>(r.elements[0].as_integer());
        a.reset = std::chrono::milliseconds(r.elements[1].as_integer());
        a.retry_after = a.reset;
        if (r.elements.size() > 2) a.admit_at_us = r.elements[2].as_integer();
        break;
      case store_query::kind::sliding_window:
        a.hits = static_cast<std::uint64_t>(r.elements[0].as_integer());
        a.reset = from_us(r.elements[1].as_integer());
        a.retry_after = r.elements.size() > 2 ? from_us(r.elements[2].as_integer()) : a.reset;
        if (r.elements.size() > 3) a.admit_at_us = r.elements[3].as_integer();
        break;
    }
    co_return a;
  }

 private:
  redis_connection& conn_;
  redis_store_options opt_;
};

}  // namespace

std::shared_ptr<decision_store> redis_store(redis_connection& conn, redis_store_options options) {
  return std::make_shared<redis_decision_store>(conn, std::move(options));
}

}  // namespace rc
