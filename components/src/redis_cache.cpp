#include "rc/redis_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "rc/error.hpp"
#include "rc/options.hpp"
#include "redis_argv.hpp"

namespace rc {

namespace {

using detail::redis_argv;
}  // namespace

void redis_cache_options::validate() const {
  if (timeout < duration::zero()) invalid_option("redis_cache", "timeout", "a duration >= 0", ms_text(timeout));
  if (!serialise) invalid_option("redis_cache", "serialise", "set (the body type has no JSON form)", "none");
  if (!deserialise)
    invalid_option("redis_cache", "deserialise", "set (the body type cannot be read from JSON)", "none");
}

redis_cache_provider::redis_cache_provider(redis_connection& conn, redis_cache_options options)
    : conn_(conn), options_(std::move(options)) {
  options_.validate();
}

task<redis_reply> redis_cache_provider::run(std::vector<std::string> args) {
  const std::string op = args.front();
  // Not a conditional expression around two co_awaits: g++ 12 miscompiles that (a bad free).
  redis_reply r;
  if (options_.timeout > duration::zero())
    r = co_await conn_.command(std::move(args), options_.timeout);
  else
    r = co_await conn_.command(std::move(args));
  if (r.is_error()) throw error(errc::step_failed, fmt::format("redis_cache: {} failed: {}", op, r.str), true);
  co_return r;
}

task<std::optional<any_body>> redis_cache_provider::get(const std::string& key, const scheduler&) {
  auto get = redis_argv("GET", redis_key(key));
  redis_reply r = co_await run(std::move(get));
  if (r.is_nil()) co_return std::nullopt;
  try {
    co_return options_.deserialise(r.str);
  } catch (...) {
    throw error(errc::step_failed,
                fmt::format("redis_cache: the entry under \"{}\" does not deserialise: {}", redis_key(key),
                            message_of(std::current_exception())),
                false);
  }
}

task<void> redis_cache_provider::put(const std::string& key, const any_body& body, std::optional<duration> ttl,
                                     const scheduler&) {
  std::vector<std::string> args{"SET", redis_key(key), options_.serialise(body)};
  if (ttl) {
    args.emplace_back("PX");
    // PX takes whole milliseconds > 0: round up, so an entry never outlives less than asked.
    args.push_back(std::to_string(std::max<long long>(1, std::chrono::ceil<std::chrono::milliseconds>(*ttl).count())));
  }
  (void)co_await run(std::move(args));
}

}  // namespace rc
