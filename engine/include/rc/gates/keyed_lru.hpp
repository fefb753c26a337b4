// Keyed LRU: a bounded table of small per-key state, for keyed throttle buckets (reference 5.3).
//
// touch(key, can_evict) finds a key or inserts it with a value-initialised State. A full table
// makes room by evicting the least recently used entry that can_evict accepts, looking at no more
// than eviction_scan entries from the LRU end; if none of those may go, touch returns nullptr and
// the caller refuses the request. Forgetting a bucket in debt would let its key skip the queue,
// so the table never evicts an entry can_evict refuses. State pointers stay valid until their
// entry is evicted or the table is cleared. No locking inside: callers serialise access.
// A table may also be made with room for fewer keys than max_keys and grow its room as touch's
// caller allows (several tables drawing on one budget: a gate's table split by key hash).
//
// Layout, chosen to cost under 64 bytes per key plus the characters of long keys:
// - slots {State, prev, next, hash, key} live in fixed-size chunks of 128, made as the table fills
//   and never moved (hence the stable pointers). prev/next are uint32 slot numbers forming the LRU
//   list. Keys up to 15 characters are stored in the slot, longer ones in an exact-size buffer.
// - chunks are carved from arenas that double in size (1, 2, 4 ... chunks, at most 1024, never
//   more than max_keys needs). An arena of a MiB or more, and an index as large, are fresh
//   anonymous pages in whole 2 MiB huge pages, advised for transparent huge pages
//   (detail::table_block): the kernel hands them over zeroed and only as they are touched, so
//   resident memory follows the keys held, and a new index needs no clearing pass. The pages of a
//   mapped arena, and of the next index from 5/8 load on (the rebuild is at 3/4), are made ahead
//   on another core (table_block::make_ahead): a fresh huge page can cost its first writer a
//   millisecond or more on a virtual machine, which would otherwise fall on one insert.
// - the index is open addressing with linear probing over uint32 entries, each packing a slot
//   number with a tag (bits mixed from the key's hash), so a probe rarely touches a slot whose key
//   cannot match. It doubles at 3/4 load (a large table of its own arenas one doubling short of
//   the largest index its max_keys needs takes that one instead, sparing the last and largest
//   rebuild), refilled from the slots in memory order (a slot keeps its hash, the tag is computed
//   from it), and deletes by backward shift, so it needs no tombstones.
//   A caller that knows how many keys are coming may size it at once (reserve_index).
// - from an index of filter_from entries (1 MiB) on, or of any size when reserve_index asks for it
//   (a part of a split table: small, but the parts' indexes together are as large), a key absent
//   from the table is told so without reading the index. A large index is past the caches: each
//   probe of it is a miss to memory. A blocked Bloom filter, an eighth of the index's size (4 bits
//   per index entry), one cache line per key with filter_probes bits set in it, says "absent" for
//   most such keys; a new key's own index entry is written max_pending inserts later, its line
//   loaded meanwhile. A key whose entry is still pending is found among those few slots after the
//   index. The filter never forgets a key (a false "maybe" costs only the probe it would have
//   spared); evictions leave stale bits, so it is refilled from the slots once the evictions since
//   its last fill pass half the keys held.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include "rc/gates/hash.hpp"

namespace rc {

namespace detail {

/// Memory for a keyed table's arrays. From one MiB up: an anonymous mapping (zeroed by the kernel,
/// resident only where touched) rounded up to whole huge pages and advised for transparent huge
/// pages; below that, the heap (zeroed only when asked). bytes() is what it holds, at least what
/// was asked. Move-only; frees what it holds.
class table_block {
 public:
  static constexpr std::size_t mapped_from = std::size_t{1} << 20;
  /// A zeroed block (an index) from 64 KiB up to mapped_from: its own mapping, all pages made at once.
  static constexpr std::size_t populated_from = std::size_t{64} << 10;
  static constexpr std::size_t huge_page = std::size_t{2} << 20;

  table_block() noexcept = default;
  /// Throws std::bad_alloc when the memory cannot be had.
  table_block(std::size_t bytes, bool zeroed);
  table_block(table_block&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)),
        mapped_(std::exchange(other.mapped_, false)),
        asked_(std::exchange(other.asked_, false)) {}
  table_block& operator=(table_block&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      mapped_ = std::exchange(other.mapped_, false);
      asked_ = std::exchange(other.asked_, false);
    }
    return *this;
  }
  ~table_block() { release(); }

  void* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }

  /// Has a mapped block's pages made now, ahead of their first write, by a helper thread (one
  /// for the process), so that the kernel's work for them (zeroing, and on a virtual machine the
  /// host's fault behind it) is done on another core than the writer's. The contents do not
  /// change: the owner may write the block meanwhile. Freeing the block takes the request back.
  /// A no-op for a block from the heap, after fork() in the child, or where the kernel cannot
  /// make pages without writing them (before Linux 5.14).
  void make_ahead() noexcept;

 private:
  void release() noexcept;

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  bool mapped_ = false;  // a mapping of its own, else from the heap
  bool asked_ = false;   // handed to the helper by make_ahead()
};

/// How many blocks' page making is asked for or under way (table_block::make_ahead): for tests.
std::size_t pages_ahead_pending() noexcept;

/// Memory that several keyed tables carve their chunks from (the parts of a split table), so
/// that they share whole huge pages instead of each growing small arenas of its own: one
/// reservation of address space, aligned to and advised for huge pages, handed out from the
/// front. Pages become resident as they are first written, or earlier: take() notes when the
/// front nears the pages made so far, and prepare(), called outside the tables' locks, makes the
/// next ones then (the kernel's zeroing of a fresh huge page takes a millisecond or more, which
/// would otherwise be spent under a table's lock). Thread-safe; memory is freed with the pool.
class chunk_pool {
 public:
  /// Reserves `bytes` (rounded up to whole huge pages). Throws std::bad_alloc when it cannot.
  explicit chunk_pool(std::size_t bytes);
  chunk_pool(const chunk_pool&) = delete;
  chunk_pool& operator=(const chunk_pool&) = delete;
  ~chunk_pool();

  /// `bytes` more from the front (a multiple of the callers' alignment), or null when the
  /// reservation is spent. Lock-free.
  void* take(std::size_t bytes) noexcept {
    const std::size_t at = front_.fetch_add(bytes, std::memory_order_relaxed);
    if (at + bytes > bytes_) return nullptr;
    // Past the first huge page (a pool that stays small costs no more than it touches), the next
    // one is made ahead.
    if (at >= ahead && at + bytes + ahead > made_.load(std::memory_order_relaxed))
      wanted_.store(true, std::memory_order_relaxed);
    return base_ + at;
  }
  /// Makes the pages ahead of the front resident, when take() asked for it; a no-op (one load)
  /// otherwise. Call it outside the lock that guards the memory's users.
  void prepare() noexcept {
    if (wanted_.load(std::memory_order_relaxed)) make_ahead();
  }
  std::size_t bytes() const noexcept { return bytes_; }

  /// How far ahead of the front pages are made: one huge page.
  static constexpr std::size_t ahead = std::size_t{2} << 20;

 private:
  void make_ahead() noexcept;

  char* base_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t mapped_bytes_ = 0;  // the mapping as made, for freeing it
  void* mapping_ = nullptr;
  std::atomic<std::size_t> front_{0};
  std::atomic<std::size_t> made_{0};  // pages made resident up to here
  std::atomic<bool> wanted_{false};
};

/// A key and its hash in 20 bytes: keys of up to 15 characters inline, longer ones in an
/// exact-size heap buffer. The last byte tells which: an inline key's size, or heap_marker (the
/// buffer's pointer and size then fill the bytes before it). Only 4-byte aligned, so that a slot
/// can pack it after four 32-bit fields.
class stored_key {
 public:
  static constexpr std::size_t inline_capacity = 15;

  stored_key() noexcept = default;
  stored_key(const stored_key&) = delete;
  stored_key& operator=(const stored_key&) = delete;
  ~stored_key() { release(); }

  std::string_view view() const noexcept {
    if (is_inline()) return {bytes_, static_cast<unsigned char>(bytes_[last])};
    return {heap_chars(), heap_size()};
  }
  std::uint32_t hash() const noexcept { return hash_; }
  std::size_t heap_bytes() const noexcept { return is_inline() ? 0 : heap_size(); }

  /// Strong guarantee: if allocating the buffer throws, the old key is kept.
  void assign(std::string_view key, std::uint32_t hash) {
    // Branching on the size itself (not on the buffer) lets the compiler see that the inline copy
    // fits; the short key's copy is a few moves, where a call to memmove cost more than it does.
    if (key.size() > inline_capacity) {
      assign_long(key);
    } else {
      release();
      copy_short(bytes_, key.data(), key.size());
      bytes_[last] = static_cast<char>(key.size());
    }
    hash_ = hash;
  }

 private:
  // Allocating first keeps the old key if new throws.
  [[gnu::noinline]] void assign_long(std::string_view key) {
    if (key.size() > std::numeric_limits<std::uint32_t>::max()) {
      throw std::length_error("rc::keyed_lru: key longer than 4 GiB");
    }
    char* heap = new char[key.size()];
    std::copy(key.begin(), key.end(), heap);
    release();
    const auto size = static_cast<std::uint32_t>(key.size());
    std::memcpy(bytes_, &heap, sizeof heap);
    std::memcpy(bytes_ + sizeof heap, &size, sizeof size);
    bytes_[last] = static_cast<char>(heap_marker);
  }

  // n <= inline_capacity characters: two fixed-size copies, one from the front and one to the end,
  // overlapping in between (for n < 4, the first, middle and last character).
  static void copy_short(char* to, const char* from, std::size_t n) noexcept {
    if (n >= 8) {
      std::memcpy(to, from, 8);
      std::memcpy(to + n - 8, from + n - 8, 8);
    } else if (n >= 4) {
      std::memcpy(to, from, 4);
      std::memcpy(to + n - 4, from + n - 4, 4);
    } else if (n > 0) {
      to[0] = from[0];
      to[n / 2] = from[n / 2];
      to[n - 1] = from[n - 1];
    }
  }

  static constexpr std::size_t last = inline_capacity;  // the byte that tells inline from heap
  static constexpr unsigned char heap_marker = 0xFF;
  static_assert(sizeof(char*) + sizeof(std::uint32_t) <= last);

  bool is_inline() const noexcept { return static_cast<unsigned char>(bytes_[last]) != heap_marker; }
  const char* heap_chars() const noexcept {
    const char* p;
    std::memcpy(&p, bytes_, sizeof p);
    return p;
  }
  std::uint32_t heap_size() const noexcept {
    std::uint32_t n;
    std::memcpy(&n, bytes_ + sizeof(char*), sizeof n);
    return n;
  }

  void release() noexcept {
    if (!is_inline()) delete[] heap_chars();
    bytes_[last] = 0;
  }

  std::uint32_t hash_ = 0;
  char bytes_[inline_capacity + 1] = {};
};
static_assert(sizeof(stored_key) == 20 && alignof(stored_key) == 4);

}  // namespace detail

template <class State>
class keyed_lru {
 public:
  /// How many entries from the LRU end touch examines when looking for one to evict.
  static constexpr std::size_t eviction_scan = 8;
  /// Keeps slot numbers, tags and index positions within 32 bits.
  static constexpr std::size_t max_supported_keys = std::size_t{1} << 30;

  /// Throws std::invalid_argument unless 1 <= max_keys <= max_supported_keys. Allocates nothing.
  explicit keyed_lru(std::size_t max_keys) : keyed_lru(max_keys, max_keys) {}
  /// A table that may hold max_keys keys but starts with room for `room` (<= max_keys) of them:
  /// touch's more_room is asked for the rest (tables that share one budget of keys). With a pool,
  /// its slots are carved from it (which must outlive the table; clear() gives them back only
  /// with the pool).
  keyed_lru(std::size_t max_keys, std::size_t room, detail::chunk_pool* pool = nullptr)
      :  // An index entry holds slot + 1 in its low bits (0 means empty) and a hash tag above them.
        slot_mask_(slot_mask_for(checked(max_keys))),
        room_(static_cast<std::uint32_t>(std::min(room, max_keys))),
        pool_(pool),
        max_keys_(static_cast<std::uint32_t>(max_keys)) {}

  /// A moved-from table is empty, keeps its max_keys and can be used again.
  keyed_lru(keyed_lru&& other) noexcept
      : slot_mask_(other.slot_mask_), room_(other.room_), pool_(other.pool_), max_keys_(other.max_keys_) {
    take_contents(other);
  }
  keyed_lru& operator=(keyed_lru&& other) noexcept {
    if (this != &other) {
      destroy_slots();
      pool_ = other.pool_;
      max_keys_ = other.max_keys_;
      room_ = other.room_;
      slot_mask_ = other.slot_mask_;
      take_contents(other);
    }
    return *this;
  }
  keyed_lru(const keyed_lru&) = delete;
  keyed_lru& operator=(const keyed_lru&) = delete;
  ~keyed_lru() { destroy_slots(); }

  /// Finds key, making it the most recently used, or inserts it with a value-initialised State.
  /// Returns nullptr, changing nothing, when the table is full and none of the eviction_scan least
  /// recently used entries passes can_evict(const State&).
  template <class CanEvict>
  State* touch(std::string_view key, CanEvict&& can_evict) {
    return touch(key, hash(key), can_evict);
  }

  /// A key's hash, as touch and find take it: a pure function of the key and max_keys, so a
  /// caller may compute it before taking the lock that serialises the table.
  struct key_hash {
    std::uint32_t home;  // low hash bits: where probing starts; also kept in the slot
    std::uint32_t tag;   // tag_of(home), positioned above the slot number
  };
  key_hash hash(std::string_view key) const noexcept { return hash_of(key); }

  /// The key's 32 hash bits that hash() starts from: the same for every table, so a caller that
  /// spreads keys over several tables may pick the table by them (by its high bits: a table's
  /// probe starts from the low ones) and then take hash_of_home() from that table.
  static std::uint32_t home_of(std::string_view key) noexcept {
    return static_cast<std::uint32_t>(detail::hash_key(key));
  }
  key_hash hash_of_home(std::uint32_t home) const noexcept { return key_hasher()(home); }

  /// hash_of_home without reading the table: a copy of what it needs, the same for every table
  /// of one max_keys, for a caller that hashes before taking the lock of a table that other
  /// threads write (reading the table's own fields then would fetch its line from their core).
  class hasher {
   public:
    key_hash operator()(std::uint32_t home) const noexcept { return {home, (home * tag_multiplier) & ~slot_mask_}; }

   private:
    friend class keyed_lru;
    explicit hasher(std::uint32_t slot_mask) noexcept : slot_mask_(slot_mask) {}
    std::uint32_t slot_mask_;
  };
  hasher key_hasher() const noexcept { return hasher(slot_mask_); }
  /// The hasher of every table of max_keys keys (which must be valid, as for the constructor).
  static hasher key_hasher_for(std::size_t max_keys) noexcept { return hasher(slot_mask_for(max_keys)); }

  /// Starts loading the index line where the key's probe begins, so that the cache miss a large
  /// table costs overlaps whatever the caller does before touch (taking its lock, reading the
  /// clock). The one call that may come from any thread without the caller's lock: it reads a
  /// copy of the index's place published for it, and a stale copy only prefetches a useless line.
  void prefetch(key_hash h) const noexcept {
    const std::uint32_t* index = index_hint_.load(std::memory_order_relaxed);
    if (index != nullptr) __builtin_prefetch(index + (h.home & index_mask_hint_.load(std::memory_order_relaxed)));
    const std::uint64_t* filter = filter_hint_.load(std::memory_order_relaxed);
    if (filter != nullptr)
      __builtin_prefetch(filter +
                         (filter_mix(h.home) & filter_mask_hint_.load(std::memory_order_relaxed)) * block_words);
  }

  /// touch with the key's hash(key) computed already.
  template <class CanEvict>
  State* touch(std::string_view key, key_hash h, CanEvict&& can_evict) {
    return touch(key, h, can_evict, [] { return std::size_t{0}; });
  }

  /// touch for a table made with less room than max_keys: when a new key finds the room taken,
  /// more_room() says how many more keys the table may hold (0: none; then the key takes an
  /// evicted entry's place as in a full table).
  template <class CanEvict, class MoreRoom>
  State* touch(std::string_view key, key_hash h, CanEvict&& can_evict, MoreRoom&& more_room) {
    // A table on a pool is a part of a split one, which threads take turns at: the slots a touch
    // writes besides the key's own are lines another thread wrote last. Fetching them for writing
    // now overlaps their misses with the index probe's instead of following it: the most recently
    // used (a new or moved key links in front of it) and, while a made slot is free, the one a
    // new key takes. (Written here, not in a function of their own: GCC takes a function that
    // only prefetches for one without effects, and drops the call.)
    if (pool_ != nullptr) {
      if (head_ != nil) __builtin_prefetch(&at(head_), 1);
      if (size_ < slots_allocated_) __builtin_prefetch(&at(size_), 1);
    }
    if (const std::uint32_t found = lookup(key, h); found != nil) {
      move_to_front(found);
      return &at(found).state;
    }
    if (size_ == room_ && room_ < max_keys_)
      room_ += static_cast<std::uint32_t>(std::min<std::size_t>(more_room(), max_keys_ - room_));
    std::uint32_t s;
    if (size_ < room_) {
      make_room_for_one_more();
      s = size_;
      replace_key(s, key, h);
      ++size_;
    } else {
      s = pick_victim(can_evict);
      if (s == nil) return nullptr;
      flush_pending();  // every slot in the index, the victim's too, before it is looked for there
      const std::uint32_t victim_pos = index_position_of(s);
      replace_key(s, key, h);  // the only step that can throw; the victim is intact if it does
      erase_index_at(victim_pos);
      unlink(s);
      at(s).state = State{};
      if (filter_ != nullptr && ++filter_stale_ > size_ / 2) refill_filter();
    }
    link_front(s);
    add_to_index(s, h);
    return &at(s).state;
  }

  /// Finds key without changing the LRU order.
  State* find(std::string_view key) noexcept { return find(key, hash_of(key)); }
  /// find with the key's hash(key) computed already.
  State* find(std::string_view key, key_hash h) noexcept {
    const std::uint32_t s = lookup(key, h);
    return s == nil ? nullptr : &at(s).state;
  }

  std::size_t size() const noexcept { return size_; }
  std::size_t max_keys() const noexcept { return max_keys_; }
  /// The bytes a chunk_pool needs for `tables` tables on it holding `keys` keys in all.
  static std::size_t pool_bytes(std::size_t keys, std::size_t tables) noexcept {
    return (keys + tables * (chunk_mask + 1)) * sizeof(slot);
  }

  /// What each key's slot takes (the index adds 4 bytes for each of its entries, long keys their
  /// characters).
  static constexpr std::size_t slot_bytes() noexcept { return sizeof(slot); }

  /// Whether the table has its filter (from an index of filter_from entries on, or as
  /// reserve_index asked; see the layout above): most lookups of absent keys then read no index
  /// entry.
  bool filtered() const noexcept { return filter_ != nullptr; }

  /// How many keys the table may hold now: max_keys, or less in a table that shares a budget.
  std::size_t room() const noexcept { return room_; }

  /// Sizes an empty table's index for `keys` keys now, so that it is not rebuilt before it holds
  /// more, and, when `filtered`, gives it the filter from that size on whatever the size (a part of
  /// a split table, whose parts' indexes are past the caches together though each is small).
  /// Throws std::bad_alloc when the memory cannot be had (the table is then as it was); a table
  /// that holds keys already is left as it is.
  void reserve_index(std::size_t keys, bool filtered) {
    if (size_ != 0) return;
    const bool was_forced = filter_forced_;
    filter_forced_ = filtered;
    try {
      rebuild_index(index_entries_for(std::min<std::size_t>(keys, max_keys_)));
    } catch (...) {
      filter_forced_ = was_forced;
      throw;
    }
  }
  /// The index entries a table holding `keys` keys has (at most 3/4 of them in use).
  static std::size_t index_entries_for(std::size_t keys) noexcept {
    return std::max(min_index_size, std::bit_ceil((keys * 4 + 2) / 3));
  }
  /// The index entries (together) from which a table has its filter.
  static constexpr std::size_t filter_from = std::size_t{1} << 18;

  /// Bytes the table uses: the slots made so far (whole chunks), the index (and the next one, once
  /// made ahead of its rebuild) and its filter, the chunk and arena lists and the characters of
  /// long keys (not the allocator's own overhead per long key). An arena's chunks not made yet are
  /// not counted (their pages may be resident already: see make_ahead).
  std::size_t memory_bytes() const noexcept {
    return slots_allocated_ * sizeof(slot) + chunks_.capacity() * sizeof(chunks_[0]) +
           arenas_.capacity() * sizeof(arenas_[0]) + (index_size() + next_index_size()) * sizeof(std::uint32_t) +
           heap_key_bytes_ + filter_block_.bytes();
  }

  /// Forgets every key and releases all memory.
  void clear() noexcept {
    destroy_slots();
    chunks_ = decltype(chunks_)();
    chunk_list_ = nullptr;
    arenas_ = decltype(arenas_)();
    arena_slots_ = arena_free_ = 0;
    index_block_ = detail::table_block();
    next_index_ = detail::table_block();
    index_ = nullptr;
    index_mask_ = 0;
    drop_filter();
    pending_count_ = pending_first_ = 0;
    publish_hint();
    slots_allocated_ = 0;
    heap_key_bytes_ = 0;
    size_ = 0;
    head_ = tail_ = nil;
  }

 private:
  static constexpr std::uint32_t nil = std::numeric_limits<std::uint32_t>::max();
  static constexpr unsigned chunk_bits = 7;  // 128 slots: 6 KiB with a 16-byte State
  static constexpr std::uint32_t chunk_mask = (1u << chunk_bits) - 1;
  static constexpr std::size_t max_arena_chunks = 1024;  // 6 MiB with a 16-byte State
  static constexpr std::size_t min_index_size = 8;
  static constexpr std::uint32_t rebuild_lead = 16;  // slots a rebuild loads ahead
  static constexpr std::size_t filter_bits_per_entry = 4;
  // The smallest index with a filter (of one block), when reserve_index asks for one.
  static constexpr std::size_t min_filtered_index = 512 / filter_bits_per_entry;
  static constexpr std::size_t block_words = 8;  // 64 bytes: one cache line per key
  static constexpr unsigned filter_probes = 3;
  static constexpr std::uint32_t max_pending = 8;

  static std::uint32_t checked(std::size_t max_keys) {
    if (max_keys == 0 || max_keys > max_supported_keys) {
      throw std::invalid_argument("rc::keyed_lru: max_keys must be in [1, 2^30]");
    }
    return static_cast<std::uint32_t>(max_keys);
  }

  // 40 bytes for a keyed throttle's state (12 bytes and 4 of padding): a State that is not a
  // plain C struct (one with a default member initialiser) lends its tail padding to prev. So a
  // State is only ever assigned (which copies its members), never memcpy'd whole over a slot's.
  struct slot {
    [[no_unique_address]] State state{};
    std::uint32_t prev = nil;  // towards the most recently used
    std::uint32_t next = nil;  // towards the least recently used
    detail::stored_key key;
  };

  key_hash hash_of(std::string_view key) const noexcept { return hash_of_home(home_of(key)); }

  // The tag comes from the home the slot keeps, so rebuilding the index reads the slots in order
  // and never looks a key up; multiplying mixes every bit of the home into the high bits, which
  // the probe position (the home's low bits) does not use.
  static constexpr std::uint32_t tag_multiplier = 0x9E3779B1u;
  static std::uint32_t slot_mask_for(std::size_t max_keys) noexcept {
    return static_cast<std::uint32_t>((std::uint64_t{1} << std::bit_width(max_keys)) - 1);
  }
  std::uint32_t tag_of(std::uint32_t home) const noexcept { return key_hasher()(home).tag; }

  slot& at(std::uint32_t s) noexcept { return chunk_list_[s >> chunk_bits][s & chunk_mask]; }
  std::uint32_t slot_of(std::uint32_t entry) const noexcept { return (entry & slot_mask_) - 1; }
  std::size_t index_size() const noexcept { return index_ != nullptr ? std::size_t{index_mask_} + 1 : 0; }
  std::size_t next_index_size() const noexcept { return next_index_.data() != nullptr ? next_index_entries() : 0; }

  std::uint32_t find_slot(std::string_view key, key_hash h) noexcept {
    if (index_ == nullptr) return nil;
    for (std::uint32_t pos = h.home & index_mask_;; pos = (pos + 1) & index_mask_) {
      const std::uint32_t entry = index_[pos];
      if (entry == 0) return nil;
      if ((entry & ~slot_mask_) != h.tag) continue;
      const std::uint32_t s = slot_of(entry);
      const detail::stored_key& k = at(s).key;
      if (k.hash() == h.home && k.view() == key) return s;
    }
  }

  // The key's slot: through the filter, the index and the pending slots once the table has a filter,
  // else through the index alone.
  std::uint32_t lookup(std::string_view key, key_hash h) noexcept {
    if (filter_ == nullptr) return find_slot(key, h);
    if (!filter_may_hold(h.home)) return nil;
    if (const std::uint32_t s = find_slot(key, h); s != nil) return s;
    for (std::uint32_t i = 0; i < pending_count_; ++i) {
      const std::uint32_t s = pending_[(pending_first_ + i) % max_pending];
      const detail::stored_key& k = at(s).key;
      if (k.hash() == h.home && k.view() == key) return s;
    }
    return nil;
  }

  // A new key's index entry: at once without a filter; else its filter bits now and its entry once
  // max_pending more keys came, the oldest pending one's going in first.
  void add_to_index(std::uint32_t s, key_hash h) noexcept {
    if (filter_ == nullptr) {
      insert_index(s, h);
      return;
    }
    filter_add(h.home);
    __builtin_prefetch(index_ + (h.home & index_mask_), 1);
    if (pending_count_ == max_pending) {
      insert_slot_index(pending_[pending_first_]);
      pending_[pending_first_] = s;
      pending_first_ = (pending_first_ + 1) % max_pending;
    } else {
      pending_[(pending_first_ + pending_count_) % max_pending] = s;
      ++pending_count_;
    }
  }

  void flush_pending() noexcept {
    for (std::uint32_t i = 0; i < pending_count_; ++i) insert_slot_index(pending_[(pending_first_ + i) % max_pending]);
    pending_count_ = pending_first_ = 0;
  }

  void insert_slot_index(std::uint32_t s) noexcept {
    const std::uint32_t home = at(s).key.hash();
    insert_index(s, {home, tag_of(home)});
  }

  // The filter's bits for a home: a block from the low bits of a 64-bit mix (the index's probe
  // starts from the home's own low bits, which the mix spreads), filter_probes positions in it from
  // the high ones.
  static std::uint64_t filter_mix(std::uint32_t home) noexcept {
    std::uint64_t x = home;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 29);
  }
  static unsigned filter_bit(std::uint64_t mix, unsigned i) noexcept {
    return static_cast<unsigned>(mix >> (32 + 9 * i)) & 511u;
  }
  bool filter_may_hold(std::uint32_t home) const noexcept {
    const std::uint64_t mix = filter_mix(home);
    const std::uint64_t* block = filter_ + (mix & filter_mask_) * block_words;
    bool all = true;
    for (unsigned i = 0; i < filter_probes; ++i) {
      const unsigned bit = filter_bit(mix, i);
      all &= ((block[bit >> 6] >> (bit & 63u)) & 1u) != 0;
    }
    return all;
  }
  void filter_add(std::uint32_t home) noexcept {
    const std::uint64_t mix = filter_mix(home);
    std::uint64_t* block = filter_ + (mix & filter_mask_) * block_words;
    for (unsigned i = 0; i < filter_probes; ++i) {
      const unsigned bit = filter_bit(mix, i);
      block[bit >> 6] |= std::uint64_t{1} << (bit & 63u);
    }
  }
  // Every key held, and no stale bit: after a rebuild's new filter, or many evictions.
  void refill_filter() noexcept {
    std::memset(filter_, 0, filter_bytes());
    for (std::uint32_t s = 0; s < size_; ++s) filter_add(at(s).key.hash());
    filter_stale_ = 0;
  }
  std::size_t filter_bytes() const noexcept { return filter_ == nullptr ? 0 : (std::size_t{filter_mask_} + 1) * 64; }
  void drop_filter() noexcept {
    filter_block_ = detail::table_block();
    filter_ = nullptr;
    filter_mask_ = 0;
    filter_stale_ = 0;
  }

  std::uint32_t index_position_of(std::uint32_t s) noexcept {
    std::uint32_t pos = at(s).key.hash() & index_mask_;
    while (slot_of(index_[pos]) != s) pos = (pos + 1) & index_mask_;
    return pos;
  }

  void insert_index(std::uint32_t s, key_hash h) noexcept {
    std::uint32_t pos = h.home & index_mask_;
    while (index_[pos] != 0) pos = (pos + 1) & index_mask_;
    index_[pos] = h.tag | (s + 1);
  }

  // Backward-shift deletion: pull later entries of the probe run into the hole when their home
  // allows it, so lookups never need tombstones.
  void erase_index_at(std::uint32_t hole) noexcept {
    for (std::uint32_t pos = (hole + 1) & index_mask_; index_[pos] != 0; pos = (pos + 1) & index_mask_) {
      const std::uint32_t home = at(slot_of(index_[pos])).key.hash() & index_mask_;
      if (((pos - home) & index_mask_) >= ((pos - hole) & index_mask_)) {
        index_[hole] = index_[pos];
        hole = pos;
      }
    }
    index_[hole] = 0;
  }

  template <class CanEvict>
  std::uint32_t pick_victim(CanEvict& can_evict) {
    std::uint32_t s = tail_;
    for (std::size_t seen = 0; seen < eviction_scan && s != nil; ++seen, s = at(s).prev) {
      if (can_evict(std::as_const(at(s).state))) return s;
    }
    return nil;
  }

  // Makes what inserting slot number size_ needs: its chunk and index space at <= 3/4 load.
  void make_room_for_one_more() {
    if (size_ == slots_allocated_) make_chunk();
    if ((std::size_t{size_} + 1) * 4 > index_size() * 3) {
      rebuild_index(next_index_entries());
    } else if ((std::size_t{size_} + 1) * 8 > index_size() * 5) {
      make_next_index();
    }
  }

  // The index after this one: twice the size; but a large table of its own arenas one doubling
  // from the largest index max_keys needs takes that one at once, skipping the last rebuild (the
  // one that would move three quarters of max_keys' keys).
  std::size_t next_index_entries() const noexcept {
    const std::size_t twice = std::max(min_index_size, index_size() * 2);
    if (pool_ != nullptr || twice < filter_from) return twice;
    const std::size_t largest = index_entries_for(max_keys_);
    return twice < largest && twice * 2 >= largest ? largest : twice;
  }

  // From 5/8 load, a mapped index's successor is made (its pages on another core) for the
  // rebuild at 3/4, if max_keys lets the table grow that far; only in a table of its own arenas (a
  // part of a split one is small, and its threads keep the cores busy). One that cannot be had
  // now is made by the rebuild, as a small one always is.
  void make_next_index() noexcept {
    const std::size_t bytes = next_index_entries() * sizeof(std::uint32_t);
    if (pool_ != nullptr || next_index_.data() != nullptr || bytes < detail::table_block::mapped_from ||
        std::size_t{max_keys_} * 4 <= index_size() * 3)
      return;
    try {
      next_index_ = detail::table_block(bytes, true);
      next_index_.make_ahead();
    } catch (const std::bad_alloc&) {
    }
  }

  // The next chunk's slots, constructed in the current arena, or in a new one twice the size of
  // the last (at most max_arena_chunks, at most what max_keys still needs; a mapped arena's
  // rounding to whole huge pages is used too).
  void make_chunk() {
    const std::size_t n = std::min<std::size_t>(chunk_mask + 1, max_keys_ - slots_allocated_);
    if (pool_ != nullptr) {
      // So that nothing below throws; doubling, as reserve() alone would grow by exactly one.
      if (chunks_.size() == chunks_.capacity()) chunks_.reserve(std::max<std::size_t>(8, 2 * chunks_.capacity()));
      void* memory = pool_->take(n * sizeof(slot));
      if (memory == nullptr) throw std::bad_alloc();
      slot* first = static_cast<slot*>(memory);
      std::uninitialized_value_construct_n(first, n);  // noexcept: a slot's parts are
      chunks_.push_back(first);
      chunk_list_ = chunks_.data();
      slots_allocated_ += static_cast<std::uint32_t>(n);
      return;
    }
    if (arena_free_ < n) {
      const std::size_t chunks = arenas_.empty() ? 1 : std::min(max_arena_chunks, 2 * (arena_slots_ >> chunk_bits));
      const std::size_t slots = std::min<std::size_t>(chunks << chunk_bits, max_keys_ - slots_allocated_);
      arenas_.reserve(arenas_.size() + 1);
      detail::table_block& arena = arenas_.emplace_back(slots * sizeof(slot), false);
      arena.make_ahead();
      arena_slots_ = arena_free_ = std::min<std::size_t>(arena.bytes() / sizeof(slot), max_keys_ - slots_allocated_);
      chunks_.reserve(chunks_.size() + (arena_slots_ >> chunk_bits) + 1);
    }
    chunks_.reserve(chunks_.size() + 1);  // so that nothing below throws
    slot* first = static_cast<slot*>(arenas_.back().data()) + (arena_slots_ - arena_free_);
    std::uninitialized_value_construct_n(first, n);  // noexcept: a slot's parts are
    chunks_.push_back(first);
    chunk_list_ = chunks_.data();
    arena_free_ -= n;
    slots_allocated_ += static_cast<std::uint32_t>(n);
  }

  void destroy_slots() noexcept {
    for (std::size_t c = 0, made = 0; made < slots_allocated_; ++c) {
      const std::size_t n = std::min<std::size_t>(chunk_mask + 1, slots_allocated_ - made);
      std::destroy_n(chunks_[c], n);
      made += n;
    }
    slots_allocated_ = 0;
  }

  // Every slot below size_ holds a key (a slot is only ever reused, never emptied), so the new
  // index is filled from the slots in memory order: one pass over them, no random reads.
  void rebuild_index(std::size_t new_size) {
    if (next_index_.data() != nullptr)
      index_block_ = std::move(next_index_);  // made ahead for this size
    else
      index_block_ = detail::table_block(new_size * sizeof(std::uint32_t), true);  // the old one kept if this throws
    index_ = static_cast<std::uint32_t*>(index_block_.data());
    index_mask_ = static_cast<std::uint32_t>(new_size - 1);
    pending_count_ = pending_first_ = 0;  // every slot below size_ goes in below, the pending ones too
    if (new_size >= filter_from || (filter_forced_ && new_size >= min_filtered_index)) {
      try {  // zeroed; without one (no memory for it), lookups probe the index
        // Only what was asked of the block (a mapped one may hold more, in whole huge pages): a
        // filter twice the size had fewer false "maybe"s but missed the caches more (rc-bench keys).
        filter_block_ = detail::table_block(new_size * filter_bits_per_entry / 8, true);
        filter_ = static_cast<std::uint64_t*>(filter_block_.data());
        filter_mask_ = static_cast<std::uint32_t>(new_size * filter_bits_per_entry / 512 - 1);
        filter_stale_ = 0;
      } catch (const std::bad_alloc&) {
        drop_filter();
      }
    }
    publish_hint();
    // The slots are read in order, but each lands at a random place in the new index: a large
    // one misses the cache on nearly every insert. Loading the place of the slot rebuild_lead
    // ahead overlaps those misses instead of taking them one after another.
    for (std::uint32_t s = 0; s < size_; ++s) {
      if (s + rebuild_lead < size_) __builtin_prefetch(index_ + (at(s + rebuild_lead).key.hash() & index_mask_), 1);
      const std::uint32_t home = at(s).key.hash();
      insert_index(s, {home, tag_of(home)});
      if (filter_ != nullptr) filter_add(home);
    }
  }

  void replace_key(std::uint32_t s, std::string_view key, key_hash h) {
    detail::stored_key& k = at(s).key;
    const std::size_t old_heap_bytes = k.heap_bytes();
    k.assign(key, h.home);
    // Written only when it changes: short keys leave the line it shares untouched.
    if (k.heap_bytes() != old_heap_bytes) heap_key_bytes_ = heap_key_bytes_ - old_heap_bytes + k.heap_bytes();
  }

  void unlink(std::uint32_t s) noexcept {
    slot& x = at(s);
    (x.prev == nil ? head_ : at(x.prev).next) = x.next;
    (x.next == nil ? tail_ : at(x.next).prev) = x.prev;
    x.prev = x.next = nil;
  }

  void link_front(std::uint32_t s) noexcept {
    slot& x = at(s);
    x.prev = nil;
    x.next = head_;
    (head_ == nil ? tail_ : at(head_).prev) = s;
    head_ = s;
  }

  void take_contents(keyed_lru& other) noexcept {
    size_ = std::exchange(other.size_, 0);
    head_ = std::exchange(other.head_, nil);
    tail_ = std::exchange(other.tail_, nil);
    index_mask_ = std::exchange(other.index_mask_, 0);
    slots_allocated_ = std::exchange(other.slots_allocated_, 0);
    heap_key_bytes_ = std::exchange(other.heap_key_bytes_, 0);
    chunks_ = std::exchange(other.chunks_, decltype(chunks_)());
    chunk_list_ = chunks_.data();
    other.chunk_list_ = nullptr;
    arenas_ = std::exchange(other.arenas_, decltype(arenas_)());
    arena_slots_ = std::exchange(other.arena_slots_, 0);
    arena_free_ = std::exchange(other.arena_free_, 0);
    index_block_ = std::move(other.index_block_);
    next_index_ = std::move(other.next_index_);
    index_ = std::exchange(other.index_, nullptr);
    filter_block_ = std::move(other.filter_block_);
    filter_ = std::exchange(other.filter_, nullptr);
    filter_mask_ = std::exchange(other.filter_mask_, 0);
    filter_stale_ = std::exchange(other.filter_stale_, 0);
    filter_forced_ = other.filter_forced_;
    pending_ = other.pending_;
    pending_count_ = std::exchange(other.pending_count_, 0);
    pending_first_ = std::exchange(other.pending_first_, 0);
    publish_hint();
    other.publish_hint();
  }

  void publish_hint() noexcept {
    index_hint_.store(index_, std::memory_order_relaxed);
    index_mask_hint_.store(index_mask_, std::memory_order_relaxed);
    filter_hint_.store(filter_, std::memory_order_relaxed);
    filter_mask_hint_.store(filter_mask_, std::memory_order_relaxed);
  }

  void move_to_front(std::uint32_t s) noexcept {
    if (s == head_) return;
    unlink(s);
    link_front(s);
  }

  // First, in 48 bytes, what every touch reads or writes: a table that threads take turns at (a
  // part of a split one) moves one cache line between them for it, with the lock and the count
  // of its decisions before it.
  std::uint32_t* index_ = nullptr;  // index_block_'s entries
  slot** chunk_list_ = nullptr;     // chunks_.data()
  std::uint32_t slot_mask_;
  std::uint32_t size_ = 0;
  std::uint32_t head_ = nil;  // most recently used
  std::uint32_t index_mask_ = 0;
  std::uint32_t room_;                  // keys it may hold now (<= max_keys_)
  std::uint32_t slots_allocated_ = 0;   // slots made (constructed), chunk by chunk
  detail::chunk_pool* pool_ = nullptr;  // where chunks come from, or null: the table's own arenas
  std::uint32_t max_keys_;
  std::uint32_t tail_ = nil;  // least recently used
  // prefetch()'s copies of index_ and index_mask_, filter_ and filter_mask_ (possibly mismatched
  // pairs: a prefetch of a wrong address does no harm).
  std::atomic<const std::uint32_t*> index_hint_{nullptr};
  std::atomic<std::uint32_t> index_mask_hint_{0};
  std::atomic<const std::uint64_t*> filter_hint_{nullptr};
  std::atomic<std::uint32_t> filter_mask_hint_{0};
  std::size_t heap_key_bytes_ = 0;
  std::vector<slot*> chunks_;  // each chunk_mask + 1 slots (the last maybe fewer), in the arenas
  std::vector<detail::table_block> arenas_;
  std::size_t arena_slots_ = 0;  // slots the last arena holds
  std::size_t arena_free_ = 0;   // of those, not made yet
  detail::table_block index_block_;
  detail::table_block next_index_;  // made ahead of the rebuild that will use it, or empty
  // The filter (null below filter_from index entries): filter_mask_ + 1 blocks of 64 bytes.
  std::uint64_t* filter_ = nullptr;
  std::uint32_t filter_mask_ = 0;
  std::uint32_t filter_stale_ = 0;  // evictions since the filter was last filled
  bool filter_forced_ = false;      // a filter at any size (reserve_index)
  detail::table_block filter_block_;
  // Slots whose index entries are still to be written, oldest at pending_first_ (a ring).
  std::array<std::uint32_t, max_pending> pending_{};
  std::uint32_t pending_count_ = 0;
  std::uint32_t pending_first_ = 0;
};

}  // namespace rc
