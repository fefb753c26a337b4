#include "rc/gates/keyed_lru.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <iterator>
#include <list>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rc/gates/token_bucket.hpp"
#include "support/eventually.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace keyed_lru_test {

namespace {

// The shape a keyed throttle stores per key: 16 bytes.
struct key_state {
  rc::token_bucket bucket;
  std::uint32_t waiters;
};
static_assert(sizeof(key_state) == 16);

using table = rc::keyed_lru<key_state>;
// The state's 4 bytes of tail padding hold the slot's LRU link: 40 bytes, not 48.
static_assert(table::slot_bytes() == 40);

constexpr auto always = [](const key_state&) { return true; };
constexpr auto never = [](const key_state&) { return false; };
constexpr auto when_idle = [](const key_state& s) { return s.waiters == 0; };

std::string key_of(std::size_t i) { return "key-" + std::to_string(i); }

// Long enough to be stored outside the slot.
std::string long_key_of(std::size_t i) { return "tenant-0000000000/user-" + std::to_string(i) + "/session-xxxxxxxx"; }

bool holds(table& t, std::string_view key) { return t.find(key) != nullptr; }

/// Fills a table with key_of(0), key_of(1), ... in steps, every one let in.
struct filler {
  table& t;
  std::size_t next = 0;
  /// Touches the keys up to key_of(n - 1); returns the table's memory then.
  std::size_t to(std::size_t n) {
    for (; next < n; ++next) REQUIRE(t.touch(key_of(next), always) != nullptr);
    return t.memory_bytes();
  }
};

}  // namespace

TEST_CASE("a keyed table rejects a max_keys of zero") { CHECK_THROWS_AS(table(0), std::invalid_argument); }

TEST_CASE("a new keyed table holds nothing and allocates nothing") {
  table t(1'000'000);
  CHECK(t.size() == 0);
  CHECK(t.max_keys() == 1'000'000);
  CHECK(t.memory_bytes() == 0);
  CHECK(t.find("absent") == nullptr);
}

TEST_CASE("touch inserts a key with a value-initialised state and finds the same state again") {
  table t(4);
  key_state* state = t.touch("alice", always);
  REQUIRE(state != nullptr);
  CHECK(state->waiters == 0);
  CHECK(state->bucket.is_full(rc::time_point{}, rc::bucket_params::from(1, std::chrono::seconds(1), std::nullopt)));
  state->waiters = 3;
  CHECK(t.touch("alice", always) == state);
  CHECK(t.find("alice") == state);
  CHECK(t.find("alice")->waiters == 3);
  CHECK(t.size() == 1);
}

TEST_CASE("keys that differ only in length, late characters or embedded zeros are told apart") {
  const std::vector<std::string> keys = {
      "",
      std::string(1, '\0'),
      std::string(2, '\0'),
      "0123456789abcde",   // 15: the longest key stored inline
      "0123456789abcdef",  // 16: the shortest stored outside
      "0123456789abcdeg",
      "0123456789abcd\xff",   // 15, ending in the byte that marks a key stored outside
      "0123456789abcde\xff",  // 16, the same
      std::string(15, '\xff'),
      std::string(16, '\xff'),
      std::string(1000, 'x'),
      [] {  // 1000 x and a y (not written as a sum: g++ 12 warns falsely about that one here)
        std::string k(1001, 'x');
        k.back() = 'y';
        return k;
      }(),
  };
  table t(16);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    t.touch(keys[i], always)->waiters = static_cast<std::uint32_t>(i + 1);
  }
  CHECK(t.size() == keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    INFO("key #" << i);
    REQUIRE(t.find(keys[i]) != nullptr);
    CHECK(t.find(keys[i])->waiters == i + 1);
  }
  CHECK(t.find("0123456789abcd") == nullptr);
  CHECK(t.find(std::string(14, '\xff')) == nullptr);
}

TEST_CASE("a key of every inline length keeps each of its characters") {
  // Keys of 0 to 16 characters, and for each the same key with one character changed at every
  // position: all are told apart, so no character of a short key is lost in storing it.
  std::vector<std::string> keys;
  for (std::size_t n = 0; n <= rc::detail::stored_key::inline_capacity + 1; ++n) {
    std::string key;
    for (std::size_t i = 0; i < n; ++i) key += static_cast<char>('a' + i);
    keys.push_back(key);
    for (std::size_t at = 0; at < n; ++at) {
      std::string other = key;
      other[at] = 'Z';
      keys.push_back(other);
    }
  }
  table t(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) t.touch(keys[i], always)->waiters = static_cast<std::uint32_t>(i + 1);
  REQUIRE(t.size() == keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    INFO("key " << keys[i]);
    REQUIRE(t.find(keys[i]) != nullptr);
    CHECK(t.find(keys[i])->waiters == i + 1);
  }
}

TEST_CASE("touch makes a key the most recently used, so the least recently touched is evicted") {
  table t(3);
  t.touch("a", always);
  t.touch("b", always);
  t.touch("c", always);
  t.touch("a", always);
  t.touch("d", always);
  CHECK(holds(t, "a"));
  CHECK_FALSE(holds(t, "b"));
  CHECK(holds(t, "c"));
  CHECK(holds(t, "d"));
  t.touch("e", always);
  CHECK_FALSE(holds(t, "c"));
  CHECK(t.size() == 3);
}

TEST_CASE("find does not change the LRU order") {
  table t(3);
  t.touch("a", always);
  t.touch("b", always);
  t.touch("c", always);
  REQUIRE(t.find("a") != nullptr);
  t.touch("d", always);
  CHECK_FALSE(holds(t, "a"));
  CHECK(holds(t, "b"));
}

TEST_CASE("a full table evicts the least recently used entry that can_evict accepts") {
  table t(3);
  t.touch("a", always)->waiters = 1;
  t.touch("b", always);
  t.touch("c", always);
  t.touch("d", when_idle);
  CHECK(holds(t, "a"));
  CHECK_FALSE(holds(t, "b"));
  CHECK(holds(t, "c"));
  CHECK(holds(t, "d"));
}

TEST_CASE("an evicted key comes back with a fresh state") {
  table t(1);
  t.touch("a", always)->waiters = 7;
  t.touch("b", always);
  key_state* again = t.touch("a", always);
  REQUIRE(again != nullptr);
  CHECK(again->waiters == 0);
}

TEST_CASE("a full table never evicts an entry can_evict refuses and then returns nullptr") {
  table t(3);
  key_state* a = t.touch("a", always);
  t.touch("b", always);
  t.touch("c", always);
  CHECK(t.touch("d", never) == nullptr);
  CHECK(t.size() == 3);
  CHECK_FALSE(holds(t, "d"));
  CHECK(t.find("a") == a);
  // The refused request left the order alone: "a" is still the least recently used.
  t.touch("e", always);
  CHECK_FALSE(holds(t, "a"));
  CHECK(holds(t, "b"));
}

TEST_CASE("touch returns nullptr when the eight least recently used entries cannot be evicted") {
  table t(20);
  for (std::size_t i = 0; i < 20; ++i) t.touch(key_of(i), always);
  for (std::size_t i = 0; i < 8; ++i) t.find(key_of(i))->waiters = 1;
  // Entries 8..19 are idle, but further than eight from the LRU end.
  CHECK(t.touch("new", when_idle) == nullptr);
  CHECK(t.size() == 20);

  // Freeing the eighth lets the scan reach it, and only it goes.
  t.find(key_of(7))->waiters = 0;
  CHECK(t.touch("new", when_idle) != nullptr);
  CHECK_FALSE(holds(t, key_of(7)));
  for (std::size_t i = 0; i < 20; ++i) {
    if (i != 7) CHECK(holds(t, key_of(i)));
  }
}

TEST_CASE("state pointers stay valid while the table grows") {
  table t(10'000);
  std::vector<key_state*> states;
  for (std::size_t i = 0; i < 5'000; ++i) {
    states.push_back(t.touch(key_of(i), always));
    states.back()->waiters = static_cast<std::uint32_t>(i);
  }
  for (std::size_t i = 0; i < 5'000; ++i) {
    REQUIRE(t.find(key_of(i)) == states[i]);
    REQUIRE(states[i]->waiters == i);
  }
}

TEST_CASE("a table past its first arenas and mapped blocks keeps every key, state and pointer") {
  // 300,000 keys: arenas of 1 to 512 chunks, the later ones and the index (1 MiB from 262,144
  // entries) in mappings of their own; moved and cleared, which unmaps them.
  constexpr std::size_t n = 300'000;
  table t(n);
  std::vector<key_state*> states;
  states.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    states.push_back(t.touch(key_of(i), never));
    REQUIRE(states.back() != nullptr);
    REQUIRE(states.back()->waiters == 0);  // value-initialised, on fresh pages as on the heap
    states.back()->waiters = static_cast<std::uint32_t>(i);
  }
  table moved(std::move(t));
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(moved.find(key_of(i)) == states[i]);
    REQUIRE(states[i]->waiters == i);
  }
  CHECK(moved.touch("one more", never) == nullptr);  // full, and nothing may be evicted
  moved.clear();
  CHECK(moved.memory_bytes() == 0);
  CHECK(moved.touch(key_of(7), always)->waiters == 0);
}

TEST_CASE("a table block of a mapped or populated size comes zeroed, and a small one when asked") {
  const rc::detail::table_block mapped(rc::detail::table_block::mapped_from, true);
  const auto* bytes = static_cast<const unsigned char*>(mapped.data());
  REQUIRE(bytes != nullptr);
  CHECK(std::all_of(bytes, bytes + mapped.bytes(), [](unsigned char b) { return b == 0; }));
  const rc::detail::table_block small(4096, true);
  const auto* few = static_cast<const unsigned char*>(small.data());
  CHECK(std::all_of(few, few + small.bytes(), [](unsigned char b) { return b == 0; }));
  // Between: an index's own mapping, its pages made at once.
  const rc::detail::table_block mid(rc::detail::table_block::populated_from * 4, true);
  const auto* between = static_cast<const unsigned char*>(mid.data());
  REQUIRE(between != nullptr);
  CHECK(std::all_of(between, between + mid.bytes(), [](unsigned char b) { return b == 0; }));
  CHECK(rc::detail::table_block(0, true).data() == nullptr);
}

#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
namespace {

// Whether this kernel makes pages without writing them (Linux 5.14 on); make_ahead needs it.
bool kernel_makes_pages_ahead() {
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  const bool ok = ::madvise(p, 4096, MADV_POPULATE_WRITE) == 0;
  ::munmap(p, 4096);
  return ok;
}

// How many of the small pages in [p, p + bytes) are resident.
std::size_t resident_pages(const void* p, std::size_t bytes) {
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((bytes + page - 1) / page);
  REQUIRE(::mincore(const_cast<void*>(p), bytes, in.data()) == 0);
  return static_cast<std::size_t>(std::count_if(in.begin(), in.end(), [](unsigned char v) { return (v & 1) != 0; }));
}
std::size_t resident_pages(const rc::detail::table_block& b) { return resident_pages(b.data(), b.bytes()); }

// Until the helper has no request left (10 s at most, for a loaded machine).
bool helper_idle() {
  return rc::test::eventually(
      std::chrono::seconds(10), [] { return rc::detail::pages_ahead_pending() == 0; }, std::chrono::microseconds(200));
}

}  // namespace

TEST_CASE("a mapped table block asked to make its pages ahead has them all made, its contents unchanged") {
  if (!kernel_makes_pages_ahead()) {
    WARN("this kernel has no MADV_POPULATE_WRITE: make_ahead is a no-op here");
    return;
  }
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  rc::detail::table_block b(8 * rc::detail::table_block::mapped_from, true);
  auto* bytes = static_cast<unsigned char*>(b.data());
  const std::size_t pages = b.bytes() / page;
  REQUIRE(resident_pages(b) < pages);  // fresh: made only as touched
  // The owner writes while the helper makes the pages.
  bytes[0] = 7;
  b.make_ahead();
  bytes[b.bytes() - 1] = 9;
  REQUIRE(helper_idle());
  CHECK(resident_pages(b) == pages);
  CHECK(bytes[0] == 7);
  CHECK(bytes[b.bytes() - 1] == 9);
  CHECK(std::all_of(bytes + 1, bytes + b.bytes() - 1, [](unsigned char v) { return v == 0; }));
  // A block from the heap is not handed over.
  rc::detail::table_block small(4096, false);
  small.make_ahead();
  CHECK(rc::detail::pages_ahead_pending() == 0);
}

TEST_CASE("freeing a table block takes back its request to make pages: none reach what is mapped there next") {
  if (!kernel_makes_pages_ahead()) {
    WARN("this kernel has no MADV_POPULATE_WRITE: make_ahead is a no-op here");
    return;
  }
  // Sixteen blocks asked for in turn keep the helper busy for tens of milliseconds. The last is
  // freed long before the helper reaches it, and a fresh mapping takes its place: had the request
  // stayed, the helper would make that mapping's pages, which nobody has touched.
  constexpr std::size_t bytes = 16 * rc::detail::table_block::mapped_from;
  std::vector<rc::detail::table_block> blocks;
  blocks.reserve(16);
  for (int i = 0; i < 16; ++i) {
    blocks.emplace_back(bytes, false);
    blocks.back().make_ahead();
  }
  void* const last = blocks.back().data();
  const std::size_t last_bytes = blocks.back().bytes();
  blocks.pop_back();
  void* const next =
      ::mmap(last, last_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  REQUIRE(next == last);
  blocks.clear();  // the one under way waited out, the rest taken back
  CHECK(rc::detail::pages_ahead_pending() == 0);
  CHECK(resident_pages(next, last_bytes) == 0);
  ::munmap(next, last_bytes);
  // A moved block keeps its request: freeing the moved-from one takes nothing back.
  rc::detail::table_block kept(bytes, false);
  kept.make_ahead();
  rc::detail::table_block moved(std::move(kept));
  kept = rc::detail::table_block();
  REQUIRE(helper_idle());
  CHECK(resident_pages(moved) == moved.bytes() / static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)));
}
#endif

TEST_CASE("a large table makes its next index ahead of the rebuild at 3/4 load, and the rebuild takes it") {
  // Index of 262,144 entries (1 MiB) from 98,305 keys to 196,608; its successor (2 MiB) is made
  // from 5/8 load (163,841 keys) on, its pages on another core, and the rebuild uses that one.
  table t(1'000'000);
  filler fill{t};
  const std::size_t before = fill.to(160'000);
  const std::size_t ahead = fill.to(190'000);
  CHECK(ahead - before >= 2 * rc::detail::table_block::mapped_from);  // 30,000 slots and a 2 MiB index
  const std::size_t rebuilt = fill.to(200'000);
  CHECK(rebuilt < ahead);  // the old 1 MiB index freed, no new one made
  for (const std::size_t k : {std::size_t{0}, std::size_t{163'840}, std::size_t{196'608}, std::size_t{199'999}})
    CHECK(holds(t, key_of(k)));
  CHECK_FALSE(holds(t, key_of(200'000)));
  // A table whose max_keys stops short of the next rebuild makes no next index.
  table capped(196'608);
  for (std::size_t k = 0; k < 196'608; ++k) REQUIRE(capped.touch(key_of(k), always) != nullptr);
  CHECK(capped.memory_bytes() < 196'608 * table::slot_bytes() + 2 * rc::detail::table_block::mapped_from);
}

TEST_CASE("a large table one doubling short of the largest index max_keys needs takes that one at once") {
  // max_keys 1,000,000 needs at most 2,097,152 entries (8 MiB). The index of 524,288 entries
  // (from 196,609 keys) is followed not by one of 1,048,576 but by the largest, made ahead from
  // 5/8 load (327,681 keys) and taken at 3/4 (393,217): no rebuild after, where doubling would
  // have moved 786,432 keys again.
  constexpr std::size_t mib = 1024 * 1024;
  table t(1'000'000);
  filler fill{t};
  const std::size_t before = fill.to(320'000);
  const std::size_t ahead = fill.to(330'000);
  CHECK(ahead - before >= 8 * mib);  // the largest index, made ahead
  CHECK(ahead - before < 8 * mib + 10'000 * table::slot_bytes() + mib);
  const std::size_t taken = fill.to(400'000);
  CHECK(taken < ahead + 70'000 * table::slot_bytes());  // the 2 MiB index freed, no new one
  const std::size_t full = fill.to(1'000'000);
  // From here to max_keys: slots and the chunk list only; a new index would be 8 MiB more.
  CHECK(full - taken < 600'000 * table::slot_bytes() + mib);
  for (const std::size_t k : {std::size_t{0}, std::size_t{393'216}, std::size_t{393'217}, std::size_t{999'999}})
    CHECK(holds(t, key_of(k)));
  CHECK_FALSE(holds(t, key_of(1'000'000)));
}

TEST_CASE("a filtered table finds each key it holds, one inserted a moment ago too, and none other") {
  // The filter comes with the index of 262,144 entries, at 98,305 keys. Keys are looked up right
  // after their insert, while their index entries are still pending, and again at the end.
  table t(1'000'000);
  std::vector<key_state*> states;
  for (std::size_t i = 0; i < 300'000; ++i) {
    const std::string key = i % 5 == 0 ? long_key_of(i) : key_of(i);
    key_state* s = t.touch(key, always);
    REQUIRE(s != nullptr);
    s->waiters = static_cast<std::uint32_t>(i);
    REQUIRE(t.find(key) == s);
    if (i >= 8) REQUIRE(t.find((i - 8) % 5 == 0 ? long_key_of(i - 8) : key_of(i - 8)) == states[i - 8]);
    states.push_back(s);
  }
  REQUIRE(t.filtered());
  const auto holds_all = [&](table& x) {
    for (std::size_t i = 0; i < states.size(); ++i) {
      const key_state* s = x.find(i % 5 == 0 ? long_key_of(i) : key_of(i));
      if (s != states[i] || s->waiters != i) return false;
    }
    return true;
  };
  CHECK(holds_all(t));
  std::size_t found = 0;
  for (std::size_t i = 300'000; i < 600'000; ++i) found += holds(t, key_of(i)) ? 1 : 0;
  CHECK(found == 0);
  // Touching a held key finds it (no second entry), pending or not.
  CHECK(t.touch(key_of(299'999), always) == states[299'999]);
  CHECK(t.touch(key_of(1), always) == states[1]);
  CHECK(t.size() == 300'000);

  // A move takes the filter and the pending entries along; a cleared table starts over unfiltered.
  table moved(std::move(t));
  CHECK(moved.filtered());
  CHECK_FALSE(t.filtered());
  CHECK(holds_all(moved));
  moved.clear();
  CHECK_FALSE(moved.filtered());
  CHECK(moved.memory_bytes() == 0);
  CHECK(moved.find(key_of(7)) == nullptr);
  CHECK(moved.touch(key_of(7), always)->waiters == 0);
}

TEST_CASE("a small table has no filter") {
  table t(98'304);  // its index stops at 131,072 entries
  for (std::size_t i = 0; i < 98'304; ++i) REQUIRE(t.touch(key_of(i), always) != nullptr);
  CHECK_FALSE(t.filtered());
  CHECK(holds(t, key_of(98'303)));
}

TEST_CASE("a full filtered table evicts the least recently used, pending keys and stale bits included") {
  // 100,000 keys: filtered from 98,305 on; then 400,000 evictions, the filter refilled after each
  // 50,000. Every third new key is touched again four inserts later (its entry still pending),
  // which makes it the most recent: the keys evicted are the oldest by last touch.
  constexpr std::size_t max_keys = 100'000, total = 500'000;
  table t(max_keys);
  std::list<std::size_t> order;  // most recent first
  std::vector<std::list<std::size_t>::iterator> where(total + 2);
  std::vector<bool> held(total + 2, false);
  const auto touch = [&](std::size_t i) {
    REQUIRE(t.touch(key_of(i), always) != nullptr);
    if (held[i]) order.erase(where[i]);
    order.push_front(i);
    where[i] = order.begin();
    held[i] = true;
    if (order.size() > max_keys) {
      held[order.back()] = false;
      order.pop_back();
    }
  };
  for (std::size_t i = 0; i < total; ++i) {
    touch(i);
    if (i >= 4 && (i - 4) % 3 == 0) touch(i - 4);
  }
  // A new key that every other key is touched after is the least recently used while its index
  // entry is still pending: the next new key evicts it.
  touch(total);
  const std::vector<std::size_t> others(order.rbegin(), std::prev(order.rend()));  // LRU first
  for (const std::size_t i : others) touch(i);
  REQUIRE(order.back() == total);
  touch(total + 1);
  CHECK_FALSE(holds(t, key_of(total)));

  REQUIRE(t.filtered());
  CHECK(t.size() == max_keys);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < total + 2; ++i) wrong += holds(t, key_of(i)) != held[i] ? 1 : 0;
  CHECK(wrong == 0);
}

namespace {

// A random run of `steps` touches through a filtered table t of max_keys keys, checked against a
// model as the test of a small table below is: keys out of `universe`, new ones, recent ones (their
// index entries maybe still pending) and old ones, an entry with odd waiters never evicted until
// its waiters leave (some steps later, as a gate's would). Once full, most new keys evict (at
// least min_evictions in all); then a refusal, made on purpose, and every key checked.
void agrees_with_model(table& t, std::size_t max_keys, std::size_t universe, int steps, std::size_t min_evictions) {
  std::list<std::size_t> order;  // most recent first
  struct entry {
    std::list<std::size_t>::iterator at;
    std::uint32_t waiters;
  };
  std::unordered_map<std::size_t, entry> model;
  std::vector<std::size_t> recent;  // the last keys inserted
  std::deque<std::size_t> busy;     // keys given odd waiters, oldest first
  std::mt19937 random(7);
  const auto can_evict = [](const key_state& s) { return s.waiters % 2 == 0; };
  std::size_t evictions = 0;
  for (int step = 0; step < steps; ++step) {
    if (busy.size() > 8) {  // the oldest busy key's waiters leave (find leaves the LRU order)
      const std::size_t k = busy.front();
      busy.pop_front();
      if (const auto it = model.find(k); it != model.end() && it->second.waiters == 1) {
        key_state* s = t.find(k % 7 == 0 ? long_key_of(k) : key_of(k));
        REQUIRE(s != nullptr);
        REQUIRE(s->waiters == 1);
        s->waiters = it->second.waiters = 0;
      }
    }
    const std::uint32_t pick = random() % 8;
    const std::size_t k = pick == 0 && !recent.empty() ? recent[random() % recent.size()] : random() % universe;
    const std::string key = k % 7 == 0 ? long_key_of(k) : key_of(k);
    const bool present = model.count(k) != 0;
    std::size_t victim = universe;
    if (!present && model.size() == max_keys) {
      std::size_t seen = 0;
      for (auto it = order.rbegin(); it != order.rend() && seen < table::eviction_scan; ++it, ++seen)
        if (model[*it].waiters % 2 == 0) {
          victim = *it;
          break;
        }
    }
    key_state* state = t.touch(key, can_evict);
    if (!present && model.size() == max_keys && victim == universe) {
      REQUIRE(state == nullptr);
      continue;
    }
    REQUIRE(state != nullptr);
    if (present) {
      REQUIRE(state->waiters == model[k].waiters);
      order.erase(model[k].at);
    } else {
      REQUIRE(state->waiters == 0);
      if (victim != universe) {
        order.erase(model[victim].at);
        model.erase(victim);
        ++evictions;
      }
      recent.push_back(k);
      if (recent.size() > 16) recent.erase(recent.begin());
    }
    order.push_front(k);
    const std::uint32_t waiters = random() % 16 == 0 ? 1 : 0;
    if (waiters == 1) busy.push_back(k);
    state->waiters = waiters;
    model[k] = {order.begin(), waiters};
    REQUIRE(t.size() == model.size());
  }
  REQUIRE(t.filtered());
  CHECK(evictions > min_evictions);

  // The eight least recently used busy: a new key is refused, and nothing changes; one of them
  // free again: the next new key takes its place.
  const std::vector<std::size_t> tail(order.rbegin(), std::next(order.rbegin(), table::eviction_scan));
  const auto state_of = [&](std::size_t k) { return t.find(k % 7 == 0 ? long_key_of(k) : key_of(k)); };
  for (const std::size_t k : tail) state_of(k)->waiters = model[k].waiters = 1;
  CHECK(t.touch(key_of(universe), can_evict) == nullptr);
  CHECK(t.find(key_of(universe)) == nullptr);
  CHECK(t.size() == max_keys);
  state_of(tail[3])->waiters = model[tail[3]].waiters = 0;
  REQUIRE(t.touch(key_of(universe), can_evict) != nullptr);
  CHECK(state_of(tail[3]) == nullptr);
  order.erase(model[tail[3]].at);
  model.erase(tail[3]);
  order.push_front(universe);
  model[universe] = {order.begin(), 0};
  std::size_t wrong = 0;
  for (std::size_t k = 0; k <= universe; ++k) {
    const key_state* s = t.find(k % 7 == 0 ? long_key_of(k) : key_of(k));
    const auto it = model.find(k);
    wrong += (it == model.end() ? s != nullptr : s == nullptr || s->waiters != it->second.waiters) ? 1 : 0;
  }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("a filtered keyed table agrees with a simple model through a long random run of touches") {
  // At the size where the table has its filter: 100,000 keys out of 250,000; more than 100,000
  // evictions refill the filter several times.
  table t(100'000);
  agrees_with_model(t, 100'000, 250'000, 600'000, 100'000);
}

TEST_CASE(
    "a table sized ahead holds its keys in that index, with a filter when asked however small, and agrees with the "
    "model") {
  // A part of a split table: sized for 3,000 keys (an index of 4,096 entries), filtered though
  // small. On a chunk pool: its memory is the index, the filter (a bit for every two entries),
  // the slots and their chunk list, nothing else.
  constexpr std::size_t keys = 3'000;
  rc::detail::chunk_pool pool(table::pool_bytes(10'000, 1));
  table t(10'000, 10'000, &pool);
  REQUIRE(table::index_entries_for(keys) == 4'096);
  t.reserve_index(keys, true);
  CHECK(t.filtered());
  constexpr std::size_t index_and_filter = 4'096 * 4 + 4'096 / 2;
  CHECK(t.memory_bytes() == index_and_filter);
  for (std::size_t i = 0; i < keys; ++i) REQUIRE(t.touch(key_of(i), always) != nullptr);
  // 24 chunks of 128 slots and a list of at most 64 chunk pointers beside the index as reserved.
  CHECK(t.memory_bytes() <= index_and_filter + 24 * 128 * table::slot_bytes() + 64 * sizeof(void*));
  for (std::size_t i = 0; i < keys; ++i) REQUIRE(holds(t, key_of(i)));
  CHECK_FALSE(holds(t, key_of(keys)));
  // A table holding keys is left as it is.
  const std::size_t held = t.memory_bytes();
  t.reserve_index(100'000, true);
  CHECK(t.memory_bytes() == held);
  // Asked for no filter, a small table sized ahead has none.
  table plain(10'000);
  plain.reserve_index(keys, false);
  CHECK_FALSE(plain.filtered());
  CHECK(plain.memory_bytes() == 4'096 * 4);

  // Full and evicting through the filter, which stays (past the reserved size too: max_keys
  // 5,000 rebuilds the index once, at 3,073 keys).
  table small(5'000);
  small.reserve_index(keys, true);
  agrees_with_model(small, 5'000, 12'000, 100'000, 20'000);
}

TEST_CASE("a keyed table agrees with a simple model through a long random run of touches") {
  // The model: a list in LRU order (front = most recent) and a map from key to state.
  constexpr std::size_t max_keys = 64;
  table t(max_keys);
  std::list<std::string> order;
  std::unordered_map<std::string, std::uint32_t> model;
  std::mt19937 random(2024);

  for (int step = 0; step < 200'000; ++step) {
    const std::size_t k = random() % 200;
    const std::string key = (k % 3 == 0) ? long_key_of(k) : key_of(k);
    const bool busy = random() % 4 == 0;
    const auto can_evict = [](const key_state& s) { return s.waiters % 2 == 0; };

    // What the model expects touch to do.
    std::string victim;
    bool refused = false;
    const bool present = model.count(key) != 0;
    if (!present && model.size() == max_keys) {
      refused = true;
      std::size_t seen = 0;
      for (auto it = order.rbegin(); it != order.rend() && seen < 8; ++it, ++seen) {
        if (model[*it] % 2 == 0) {
          victim = *it;
          refused = false;
          break;
        }
      }
    }

    key_state* state = t.touch(key, can_evict);
    if (refused) {
      REQUIRE(state == nullptr);
      continue;
    }
    REQUIRE(state != nullptr);
    if (present) {
      REQUIRE(state->waiters == model[key]);
      order.remove(key);
    } else {
      REQUIRE(state->waiters == 0);
      if (!victim.empty()) {
        order.remove(victim);
        model.erase(victim);
        REQUIRE(t.find(victim) == nullptr);
      }
    }
    order.push_front(key);
    state->waiters = model[key] = busy ? 1 : 0;
    REQUIRE(t.size() == model.size());
  }
  for (const auto& [key, waiters] : model) {
    REQUIRE(t.find(key) != nullptr);
    REQUIRE(t.find(key)->waiters == waiters);
  }
}

TEST_CASE("a full keyed table costs at most 53 bytes per key plus the characters of long keys") {
  // A 40-byte slot and the index's share. 12'289 is the worst case for the index: just over 3/4
  // of 16'384, so it doubles to 32'768 (10.7 bytes per key); 98'305 for the index with its
  // filter, which comes with the index of 262'144 entries (12 bytes per key between them).
  for (const std::size_t max_keys :
       {std::size_t{10'000}, std::size_t{12'289}, std::size_t{98'305}, std::size_t{1'000'000}}) {
    table t(max_keys);
    std::size_t long_key_chars = 0;
    for (std::size_t i = 0; i < max_keys; ++i) {
      const std::string key = i % 2 == 0 ? key_of(i) : long_key_of(i);
      if (key.size() > rc::detail::stored_key::inline_capacity) long_key_chars += key.size();
      t.touch(key, always);
    }
    REQUIRE(t.size() == max_keys);
    const double bytes_per_key = static_cast<double>(t.memory_bytes() - long_key_chars) / static_cast<double>(max_keys);
    INFO("max_keys " << max_keys << ": " << bytes_per_key << " bytes per key");
    CHECK(bytes_per_key <= 53);
  }
}

TEST_CASE("memory stays bounded while 2,000,000 distinct keys pass through 10,000 slots") {
  // Bound: 64 bytes per key (slot, index share, chunk list) plus, at worst, every resident key
  // being a long one whose characters live outside the slot.
  constexpr std::size_t max_keys = 10'000;
  const std::size_t longest = long_key_of(1'999'999).size();
  const std::size_t bound = max_keys * (64 + longest);
  table t(max_keys);
  std::size_t peak = 0;
  for (std::size_t i = 0; i < 2'000'000; ++i) {
    const std::string key = i % 4 == 0 ? long_key_of(i) : key_of(i);
    REQUIRE(t.touch(key, always) != nullptr);
    if (i % 1000 == 0) peak = std::max(peak, t.memory_bytes());
  }
  CHECK(t.size() == max_keys);
  CHECK(peak <= bound);
  CHECK(t.memory_bytes() <= bound);
}

TEST_CASE("a table of a million keys holding ten allocates only for the ten") {
  table t(1'000'000);
  for (std::size_t i = 0; i < 10; ++i) t.touch(key_of(i), always);
  CHECK(t.size() == 10);
  CHECK(t.memory_bytes() <= 8 * 1024);
}

TEST_CASE("clear forgets every key and releases the memory") {
  table t(100);
  for (std::size_t i = 0; i < 100; ++i) t.touch(long_key_of(i), always);
  REQUIRE(t.memory_bytes() > 0);
  t.clear();
  CHECK(t.size() == 0);
  CHECK(t.memory_bytes() == 0);
  CHECK(t.find(long_key_of(5)) == nullptr);
  CHECK(t.touch("again", always)->waiters == 0);
  CHECK(t.size() == 1);
}

TEST_CASE("a moved-from table is empty and still usable") {
  table t(8);
  key_state* a = t.touch(long_key_of(1), always);
  t.touch("b", always);
  table moved(std::move(t));
  CHECK(moved.size() == 2);
  CHECK(moved.find(long_key_of(1)) == a);
  // Using t after the move is the point: its state afterwards is part of the contract.
  CHECK(t.size() == 0);
  CHECK(t.memory_bytes() == 0);
  CHECK(t.find("b") == nullptr);
  CHECK(t.touch("c", always) != nullptr);

  t = std::move(moved);
  CHECK(t.size() == 2);
  CHECK(t.find("b") != nullptr);
  CHECK(moved.size() == 0);
  CHECK(moved.touch("d", always) != nullptr);
}

TEST_CASE("the hasher made for a max_keys hashes a key as every table of that max_keys does") {
  for (const std::size_t max_keys : {std::size_t{1}, std::size_t{1000}, std::size_t{65'536}, std::size_t{1'000'000}}) {
    table t(max_keys, std::min<std::size_t>(max_keys, 64));
    const table::hasher hash = table::key_hasher_for(max_keys);
    for (std::size_t i = 0; i < 64 && i < max_keys; ++i) {
      const std::string key = i % 2 == 0 ? key_of(i) : long_key_of(i);
      const table::key_hash mine = hash(table::home_of(key)), its = t.hash(key);
      CHECK(mine.home == its.home);
      CHECK(mine.tag == its.tag);
      CHECK(t.key_hasher()(table::home_of(key)).tag == its.tag);
      // A key touched with the copied hasher's hash is found by the table's own.
      key_state* s = t.touch(key, mine, always);
      REQUIRE(s != nullptr);
      CHECK(t.find(key) == s);
    }
  }
}

// ---- tables that share a budget of keys and a chunk pool (a split gate's parts) -----------------

TEST_CASE("a table made with less room asks more_room for each new key past it, and never holds more") {
  table t(1000, 0);
  std::size_t granted = 0, asked = 0;
  const auto two_more = [&] {
    ++asked;
    granted += 2;
    return std::size_t{2};
  };
  for (std::size_t i = 0; i < 5; ++i) REQUIRE(t.touch(key_of(i), t.hash(key_of(i)), always, two_more) != nullptr);
  CHECK(asked == 3);  // at 0, 2 and 4 keys
  CHECK(t.room() == 6);
  CHECK(t.size() == 5);
  // Touching a key it holds asks nothing.
  REQUIRE(t.touch(key_of(0), t.hash(key_of(0)), always, two_more) != nullptr);
  CHECK(asked == 3);
}

TEST_CASE("a table whose budget is spent evicts as a full one does, or refuses when nothing may go") {
  table t(1000, 3);
  const auto none = [] { return std::size_t{0}; };
  for (std::size_t i = 0; i < 3; ++i) REQUIRE(t.touch(key_of(i), t.hash(key_of(i)), never, none) != nullptr);
  CHECK(t.touch(key_of(3), t.hash(key_of(3)), never, none) == nullptr);  // nothing evictable
  CHECK(t.size() == 3);
  REQUIRE(t.touch(key_of(3), t.hash(key_of(3)), always, none) != nullptr);  // the LRU goes
  CHECK(t.size() == 3);
  CHECK_FALSE(holds(t, key_of(0)));
  CHECK(holds(t, key_of(3)));
  // more_room is held to max_keys.
  table small(4, 0);
  const auto plenty = [] { return std::size_t{100}; };
  for (std::size_t i = 0; i < 6; ++i) REQUIRE(small.touch(key_of(i), small.hash(key_of(i)), always, plenty) != nullptr);
  CHECK(small.room() == 4);
  CHECK(small.size() == 4);
}

TEST_CASE("tables on one chunk pool keep their own keys, states and pointers") {
  constexpr std::size_t keys = 20'000;  // several chunks each, past the pool's first huge page
  rc::detail::chunk_pool pool(table::pool_bytes(2 * keys, 2));
  table a(2 * keys, 2 * keys, &pool), b(2 * keys, 2 * keys, &pool);
  std::vector<key_state*> pa, pb;
  for (std::size_t i = 0; i < keys; ++i) {
    key_state* x = a.touch(key_of(i), always);
    key_state* y = b.touch(long_key_of(i), always);
    REQUIRE(x != nullptr);
    REQUIRE(y != nullptr);
    x->waiters = static_cast<std::uint32_t>(i);
    y->waiters = static_cast<std::uint32_t>(i + 1);
    pa.push_back(x);
    pb.push_back(y);
    pool.prepare();
  }
  for (std::size_t i = 0; i < keys; i += 97) {
    CHECK(a.find(key_of(i)) == pa[i]);
    CHECK(b.find(long_key_of(i)) == pb[i]);
    CHECK(pa[i]->waiters == i);
    CHECK(pb[i]->waiters == i + 1);
    CHECK_FALSE(holds(a, long_key_of(i)));
  }
}

TEST_CASE("a chunk pool hands out disjoint aligned stretches until it is spent, from two threads at once") {
  constexpr std::size_t chunk = 6144;  // 128 slots of 48 bytes
  rc::detail::chunk_pool pool(8u << 20);
  REQUIRE(pool.bytes() == (8u << 20));
  std::vector<char*> got[2];
  const auto take_all = [&](std::vector<char*>& out) {
    while (char* p = static_cast<char*>(pool.take(chunk))) {
      p[0] = 1;  // the memory is usable
      p[chunk - 1] = 1;
      out.push_back(p);
      pool.prepare();  // pages ahead, outside any lock, while the other thread writes its own
    }
  };
  std::thread other([&] { take_all(got[1]); });
  take_all(got[0]);
  other.join();
  std::vector<char*> all(got[0]);
  all.insert(all.end(), got[1].begin(), got[1].end());
  std::sort(all.begin(), all.end());
  CHECK(all.size() == (8u << 20) / chunk);
  for (std::size_t i = 0; i < all.size(); ++i) {
    CHECK(reinterpret_cast<std::uintptr_t>(all[i]) % 64 == 0);
    if (i > 0) CHECK(all[i] - all[i - 1] == static_cast<std::ptrdiff_t>(chunk));
  }
  CHECK(pool.take(chunk) == nullptr);  // spent: stays spent
}

TEST_CASE("a key's hash depends on every byte and on the length, and spreads keys alike over low and high bits") {
  // A byte the loads skipped (a short key's middle, a long key's block) would leave two keys
  // that differ only there with one hash.
  for (std::size_t n = 1; n <= 48; ++n) {
    const std::string k(n, 'a');
    const std::uint64_t h = rc::detail::hash_key(k);
    for (std::size_t i = 0; i < n; ++i) {
      std::string other = k;
      other[i] = 'b';
      INFO("length " << n << ", byte " << i);
      CHECK(rc::detail::hash_key(other) != h);
    }
    CHECK(rc::detail::hash_key(std::string(n + 1, 'a')) != h);
  }
  CHECK(rc::detail::hash_key("") != rc::detail::hash_key(std::string(1, '\0')));
  // 65,536 keys alike but for a counter over 4,096 buckets: 16 a bucket on average, and none far
  // from it, by the low 12 bits (where a table's probe starts) or the high 12 (a split table's part).
  std::vector<int> low(4096), high(4096);
  for (int i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint32_t>(rc::detail::hash_key("user-" + std::to_string(i)));
    ++low[h & 4095];
    ++high[h >> 20];
  }
  CHECK(*std::max_element(low.begin(), low.end()) <= 40);
  CHECK(*std::max_element(high.begin(), high.end()) <= 40);
  CHECK(*std::min_element(low.begin(), low.end()) >= 2);
  CHECK(*std::min_element(high.begin(), high.end()) >= 2);
}

}  // namespace keyed_lru_test
