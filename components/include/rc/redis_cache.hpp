// rc::redis_cache<T>(conn, {...}): a provider for the cache wrapper (rc/wrappers/cache.hpp) that
// keeps entries in Redis, so that several instances share one cache.
//
// - One Redis string per entry, under `prefix + key` (the wrapper's key). `GET` reads it;
//   `SET ... PX <ttl>` writes it, so the server expires it: the TTL is the server's real time, not
//   engine time (a virtual clock does not age Redis entries). No TTL: the entry lives until Redis
//   evicts it (maxmemory policy) or someone deletes it.
// - Values are text. By default a body is stored as its JSON text (nlohmann::json(T)) and read
//   back with json::get<T>(), so T must convert both ways (adl to_json/from_json or a type
//   nlohmann knows). `serialise` / `deserialise` replace both directions (binary formats, types
//   without a JSON form); a std::string body is stored as JSON text too, unless replaced.
// - Every command goes through the shared connection, with its timeout (`timeout`, or the
//   connection's command_timeout). A transport failure or a server error reply throws rc::error:
//   the wrapper reports route:cache:failed; on get it fails the exchange (RC5028) unless the
//   cache() has `on_provider_error = bypass`, which runs the step as if uncached. An entry that
//   does not deserialise is a failure too (never a silent miss).
// - The connection must outlive the routes that use the provider.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "rc/redis.hpp"
#include "rc/wrappers/cache.hpp"

namespace rc {

struct redis_cache_options {
  /// Prepended to every key (a namespace per cache; include a separator: "orders:cache:").
  std::string prefix = "rc:cache:";
  /// Body -> stored text. Default (redis_cache<T>): the body's JSON text.
  std::function<std::string(const any_body&)> serialise;
  /// Stored text -> body. Default (redis_cache<T>): JSON parsed into a T.
  std::function<any_body(const std::string&)> deserialise;
  /// Per-command timeout; zero: the connection's command_timeout.
  duration timeout{};

  void validate() const;
};

class redis_cache_provider final : public cache_provider {
 public:
  /// Both serialise and deserialise must be set (redis_cache<T> fills them in).
  redis_cache_provider(redis_connection& conn, redis_cache_options options);

  task<std::optional<any_body>> get(const std::string& key, const scheduler& clock) override;
  task<void> put(const std::string& key, const any_body& body, std::optional<duration> ttl,
                 const scheduler& clock) override;

  /// The Redis key an entry lives under.
  std::string redis_key(const std::string& key) const { return options_.prefix + key; }

 private:
  task<redis_reply> run(std::vector<std::string> args);

  redis_connection& conn_;
  redis_cache_options options_;
};

/// A Redis cache provider for bodies of type T; pass it as cache({ .provider = ... }).
template <class T>
std::shared_ptr<redis_cache_provider> redis_cache(redis_connection& conn, redis_cache_options options = {}) {
  if (!options.serialise) {
    if constexpr (std::is_constructible_v<nlohmann::json, const T&>) {
      options.serialise = [](const any_body& b) { return nlohmann::json(b.get<T>()).dump(); };
    }
  }
  if (!options.deserialise) {
    if constexpr (requires(const nlohmann::json& j) { j.get<T>(); }) {
      options.deserialise = [](const std::string& text) { return any_body(nlohmann::json::parse(text).get<T>()); };
    }
  }
  return std::make_shared<redis_cache_provider>(conn, std::move(options));
}

}  // namespace rc
