#include "rc/exchange.hpp"

#include <fmt/format.h>

#include <array>
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

namespace {

// Set when this thread's store of extras blocks is gone (thread exit): a block released after
// that is freed at once. Trivially destructible, so it can be read at any time.
thread_local bool extras_store_gone = false;

}  // namespace

// Up to four cleared blocks per thread; larger ones (a long note or hook list) are not kept.
struct exchange::extras_store {
  static constexpr std::size_t kept = 4;
  std::array<extras*, kept> blocks{};
  std::size_t count = 0;
  extras_store() = default;
  extras_store(const extras_store&) = delete;
  extras_store& operator=(const extras_store&) = delete;
  ~extras_store() {
    extras_store_gone = true;
    for (std::size_t i = 0; i < count; ++i) delete blocks[i];
  }
  static extras_store& of_this_thread() {
    thread_local extras_store store;
    return store;
  }
};

exchange::extras* exchange::take_extras() {
  if (!extras_store_gone) {
    auto& store = extras_store::of_this_thread();
    if (store.count > 0) return store.blocks[--store.count];
  }
  return new extras;
}

void exchange::extras_release::operator()(extras* e) const noexcept {
  constexpr std::size_t small = 4;
  const bool keep = !extras_store_gone && e->limits.capacity() <= small && e->finish_hooks.capacity() <= small &&
                    e->correlation.capacity() <= 128;
  if (keep) {
    // Cleared before the store is looked at: a hook's captures, destroyed here, may release an
    // exchange of their own into it.
    e->correlation.clear();
    e->principal.reset();
    e->deadline.reset();
    e->abort = nullptr;
    e->limits.clear();
    e->finish_hooks.clear();
    auto& store = extras_store::of_this_thread();
    if (store.count < extras_store::kept) {
      store.blocks[store.count++] = e;
      return;
    }
  }
  delete e;
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
