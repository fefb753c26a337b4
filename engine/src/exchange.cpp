#include "rc/exchange.hpp"

#include <fmt/format.h>

#include <atomic>
#include <random>

namespace rc {
namespace {

// The high 64 bits of every id: random per process, so ids from two processes do not collide.
std::uint64_t process_salt() {
  static const std::uint64_t salt = [] {
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }();
  return salt;
}

std::atomic<std::uint64_t> id_counter{1};

}  // namespace

// Each thread takes ids from the shared counter a block at a time, so making an exchange costs no
// locked instruction: ids stay unique in the process, and in order within a thread (one thread,
// as in virtual time, sees 1, 2, 3 ...), but not in order across threads.
std::uint64_t exchange::next_id() noexcept {
  constexpr std::uint64_t block = 1024;
  thread_local std::uint64_t next = 0;
  thread_local std::uint64_t end = 0;
  if (next == end) {
    next = id_counter.fetch_add(block, std::memory_order_relaxed);
    end = next + block;
  }
  return next++;
}
std::uint64_t exchange::reserve_ids(std::size_t n) noexcept {
  return id_counter.fetch_add(n, std::memory_order_relaxed);
}

std::string exchange::id() const {
  const std::uint64_t hi = process_salt();
  // 8-4-4-4-12 hex: salt, then the counter.
  return fmt::format("{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", static_cast<std::uint32_t>(hi >> 32),
                     static_cast<std::uint32_t>((hi >> 16) & 0xffff), static_cast<std::uint32_t>(hi & 0xffff),
                     static_cast<std::uint32_t>((id_ >> 48) & 0xffff), id_ & 0xffffffffffffULL);
}

std::string exchange::header_or(std::string_view key, std::string_view fallback) const {
  const auto* v = headers_.find(key);
  if (!v || v->is_null()) return std::string(fallback);
  return v->is_string() ? v->get<std::string>() : v->dump();
}

nlohmann::json header_map::to_json() const {
  auto out = nlohmann::json::object();
  for (const auto& [k, v] : items_) out[k] = v;
  return out;
}

const exchange::extras& exchange::no_extras() noexcept {
  static const extras none;
  return none;
}

exchange exchange::clone() const {
  exchange out;
  out.set_correlation_id(correlation_id());
  out.headers_ = headers_;
  out.body_ = body_.clone();
  out.more().principal = principal();
  out.more().deadline = deadline();
  out.route_ = route_;
  return out;
}

nlohmann::json exchange::to_json() const {
  return {{"id", id()}, {"headers", headers_.to_json()}, {"body", body_.to_json()}};
}

}  // namespace rc
