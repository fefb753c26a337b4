#include "rc/task.hpp"

#include <array>
#include <cstdlib>
#include <new>

namespace rc::detail {
namespace {

// Size classes of 16 bytes up to 2 KiB; larger frames go to the heap. Each thread keeps at most
// `max_cached` frames per class so a burst of 200,000 waiting exchanges does not pin its peak
// memory forever. A frame freed on another thread simply joins that thread's cache.
// 16, not 64: every parked exchange holds a chain of frames, and rounding each up to 64 bytes
// wasted ~32 bytes a frame on average (rc-bench delay0, inflight: <= 1 KB per waiting exchange).
constexpr std::size_t granule = 16;
constexpr std::size_t class_count = 128;
constexpr std::size_t max_cached = 4096;

struct free_node {
  free_node* next;
};

struct frame_cache {
  std::array<free_node*, class_count> heads{};
  std::array<std::size_t, class_count> counts{};
  ~frame_cache() {
    for (auto* head : heads)
      while (head) {
        auto* next = head->next;
        ::operator delete(head);
        head = next;
      }
  }
};

thread_local frame_cache cache;

}  // namespace

void* allocate_frame(std::size_t size) {
  const std::size_t cls = (size + granule - 1) / granule;
  if (cls >= class_count) return ::operator new(size);
  if (auto* node = cache.heads[cls]) {
    cache.heads[cls] = node->next;
    --cache.counts[cls];
    return node;
  }
  return ::operator new(cls* granule);
}

void free_frame(void* frame, std::size_t size) noexcept {
  const std::size_t cls = (size + granule - 1) / granule;
  if (cls >= class_count || cache.counts[cls] >= max_cached) {
    ::operator delete(frame);
    return;
  }
  auto* node = static_cast<free_node*>(frame);
  node->next = cache.heads[cls];
  cache.heads[cls] = node;
  ++cache.counts[cls];
}

}  // namespace rc::detail
