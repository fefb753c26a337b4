// detail::table_block: a keyed table's large arrays on fresh pages advised for huge pages.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <new>
#include <thread>

#include "rc/gates/keyed_lru.hpp"

#if defined(__linux__)
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
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

#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
#define RC_PAGES_AHEAD 1

// table_block::make_ahead's helper: one thread for the process, started by the first request,
// that makes each asked block's pages with MADV_POPULATE_WRITE (which faults them in as a write
// would, without writing), in the order asked, a huge page at a time. forget() drops a block's
// request, or stops the one under way after its current piece and waits for that: no request
// outlives its block's mapping. The thread keeps the default priority: at idle priority it could
// be preempted for long on a busy machine while the kernel's memory-map lock is held for a
// piece, and every mmap of the process would wait behind it. Never destroyed (a block may be
// freed by a static destructor); a thread parked on a condition variable holds nothing at exit.
// In a fork()ed child (the helper is the parent's) it does nothing.
class page_maker {
 public:
  static page_maker& instance() {
    static page_maker* const one = new page_maker();
    return *one;
  }

  void ask(char* p, std::size_t bytes) noexcept {
    if (!supported_.load(std::memory_order_relaxed) || !in_owner()) return;
    {
      std::lock_guard lock(mutex_);
      try {
        if (!started_) {
          std::thread([this] { run(); }).detach();
          started_ = true;
        }
        jobs_.push_back({p, bytes});
      } catch (...) {  // no thread or no room for the request: the pages are made on first write
        return;
      }
    }
    wake_.notify_one();
  }

  void forget(const char* p) noexcept {
    if (!in_owner()) return;
    std::unique_lock lock(mutex_);
    std::erase_if(jobs_, [p](const job& j) { return j.p == p; });
    if (busy_ == p) {
      stop_busy_.store(true, std::memory_order_relaxed);
      done_.wait(lock, [&] { return busy_ != p; });
    }
  }

  std::size_t pending() noexcept {
    if (!in_owner()) return 0;
    std::lock_guard lock(mutex_);
    return jobs_.size() + (busy_ != nullptr ? 1 : 0);
  }

 private:
  struct job {
    char* p;
    std::size_t bytes;
  };

  bool in_owner() const noexcept { return ::getpid() == owner_; }

  void run() {
    (void)::pthread_setname_np(::pthread_self(), "rc-pages-ahead");
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return !jobs_.empty(); });
      const job j = jobs_.front();
      jobs_.pop_front();
      busy_ = j.p;
      stop_busy_.store(false, std::memory_order_relaxed);
      lock.unlock();
      for (std::size_t at = 0; at < j.bytes && !stop_busy_.load(std::memory_order_relaxed);) {
        const std::size_t n = std::min(table_block::huge_page, j.bytes - at);
        if (::madvise(j.p + at, n, MADV_POPULATE_WRITE) != 0 && errno == EINVAL) {
          supported_.store(false, std::memory_order_relaxed);  // a kernel without it: ask no more
          break;
        }
        at += n;
      }
      lock.lock();
      busy_ = nullptr;
      done_.notify_all();
    }
  }

  const pid_t owner_ = ::getpid();
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::deque<job> jobs_;
  const char* busy_ = nullptr;
  std::atomic<bool> stop_busy_{false};
  std::atomic<bool> supported_{true};
  bool started_ = false;
};
#endif

}  // namespace

void table_block::make_ahead() noexcept {
#if defined(RC_PAGES_AHEAD)
  if (!mapped_ || asked_) return;
  asked_ = true;
  page_maker::instance().ask(static_cast<char*>(data_), bytes_);
#endif
}

std::size_t pages_ahead_pending() noexcept {
#if defined(RC_PAGES_AHEAD)
  return page_maker::instance().pending();
#else
  return 0;
#endif
}

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
#if defined(RC_PAGES_AHEAD)
  if (asked_) page_maker::instance().forget(static_cast<const char*>(data_));
#endif
  asked_ = false;
  if (data_ != nullptr && !(mapped_ && unmap_pages(data_, bytes_))) std::free(data_);
  data_ = nullptr;
  bytes_ = 0;
  mapped_ = false;
}

}  // namespace rc::detail

#undef RC_PAGES_AHEAD
