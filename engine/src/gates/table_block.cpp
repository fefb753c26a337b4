// detail::table_block: a keyed table's large arrays on fresh pages advised for huge pages.
#include <cstdlib>
#include <new>

#include "rc/gates/keyed_lru.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace rc::detail {
namespace {

// Fresh anonymous pages (zero), or null where this platform has no such mapping here.
void* map_pages(std::size_t bytes) {
#if defined(__linux__)
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  // Advice only: where transparent huge pages are off, the mapping works with small pages.
  (void)::madvise(p, bytes, MADV_HUGEPAGE);
  return p;
#else
  (void)bytes;
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

table_block::table_block(std::size_t bytes, bool zeroed) {
  if (bytes == 0) return;
  // Whole huge pages: a mapping's tail short of one would be small pages, a fault each.
  if (bytes >= mapped_from) bytes = (bytes + huge_page - 1) / huge_page * huge_page;
  void* p = bytes >= mapped_from ? map_pages(bytes) : nullptr;
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
