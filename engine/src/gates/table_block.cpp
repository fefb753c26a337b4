// detail::table_block: a keyed table's large arrays on fresh pages advised for huge pages.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "rc/gates/keyed_lru.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace rc::detail {
namespace {

// Fresh anonymous pages (zero), or null where this platform has no such mapping here. Huge:
// advised for huge pages, made as they are touched. Else small pages, all made at once: one
// system call in place of a fault per page (a fault costs tens of microseconds on some virtual
// machines), for an index that its first rebuild writes nearly every page of anyway.
void* map_pages(std::size_t bytes, bool huge) {
#if defined(__linux__)
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  // Advice only: where transparent huge pages are off, the mapping works with small pages, and
  // a kernel without MADV_POPULATE_WRITE makes them on first touch.
  if (huge) {
    (void)::madvise(p, bytes, MADV_HUGEPAGE);
  } else {
#if defined(MADV_POPULATE_WRITE)
    (void)::madvise(p, bytes, MADV_POPULATE_WRITE);
#endif
  }
  return p;
#else
  (void)bytes;
  (void)huge;
  return nullptr;
#endif
}

bool unmap_pages(void* p, std::size_t bytes) noexcept {
#if defined(__linux__)
  return ::munmap(p, bytes) == 0;
#else
  (void)p;
  (void)bytes;
  return false;
#endif
}

}  // namespace

chunk_pool::chunk_pool(std::size_t bytes) {
  bytes =
      (std::max<std::size_t>(bytes, 1) + table_block::huge_page - 1) / table_block::huge_page * table_block::huge_page;
#if defined(__linux__)
  // Address space only (no reserve of swap): a huge page's worth more, to start on a boundary.
  mapped_bytes_ = bytes + table_block::huge_page;
  mapping_ = ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping_ == MAP_FAILED) throw std::bad_alloc();
  const auto at = reinterpret_cast<std::uintptr_t>(mapping_);
  base_ = reinterpret_cast<char*>((at + table_block::huge_page - 1) / table_block::huge_page * table_block::huge_page);
  (void)::madvise(base_, bytes, MADV_HUGEPAGE);  // advice only, as for table_block
#else
  mapped_bytes_ = bytes;
  mapping_ = std::calloc(1, bytes);
  if (mapping_ == nullptr) throw std::bad_alloc();
  base_ = static_cast<char*>(mapping_);
#endif
  bytes_ = bytes;
}

chunk_pool::~chunk_pool() {
#if defined(__linux__)
  ::munmap(mapping_, mapped_bytes_);
#else
  std::free(mapping_);
#endif
}

void chunk_pool::make_ahead() noexcept {
  wanted_.store(false, std::memory_order_relaxed);
  std::size_t made = made_.load(std::memory_order_relaxed);
  // The end of the huge page after the front's.
  const std::size_t want = std::min(bytes_, (front_.load(std::memory_order_relaxed) / ahead + 2) * ahead);
  // One thread makes a stretch: the one that moves made_ over it.
  while (made < want && !made_.compare_exchange_weak(made, want, std::memory_order_relaxed)) {
  }
  if (made >= want) return;
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
  // Faults the pages in as a write would, without writing: memory being written meanwhile (the
  // front's chunks) is not disturbed. An older kernel refuses; the pages are then made on first
  // write, as without a pool.
  (void)::madvise(base_ + made, want - made, MADV_POPULATE_WRITE);
#endif
}

table_block::table_block(std::size_t bytes, bool zeroed) {
  if (bytes == 0) return;
  // Whole huge pages: a mapping's tail short of one would be small pages, a fault each.
  if (bytes >= mapped_from) bytes = (bytes + huge_page - 1) / huge_page * huge_page;
  void* p = bytes >= mapped_from                ? map_pages(bytes, true)
            : zeroed && bytes >= populated_from ? map_pages(bytes, false)
                                                : nullptr;
  mapped_ = p != nullptr;
  if (p == nullptr) p = zeroed ? std::calloc(1, bytes) : std::malloc(bytes);
  if (p == nullptr) throw std::bad_alloc();
  data_ = p;
  bytes_ = bytes;
}

void table_block::release() noexcept {
  if (data_ != nullptr && !(mapped_ && unmap_pages(data_, bytes_))) std::free(data_);
  data_ = nullptr;
  bytes_ = 0;
  mapped_ = false;
}

}  // namespace rc::detail
