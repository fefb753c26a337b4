// rc::task<T>: the engine's coroutine type.
//
// Lazy (nothing runs until awaited or spawned), awaited by symmetric transfer (no stack growth
// along a chain of awaits), single owner. Frames come from a per-thread pool of size classes, so
// the steady state of a pipeline allocates nothing per step. `spawn` starts a task detached; its
// frame frees itself. An exception escapes through `co_await` like a normal throw.
//
// Why not asio::awaitable: the engine must run identically on a manual clock with no io_context
// involved, the hot path wants a synchronous fast path with no frame at all, and a frame pool of
// our own keeps the per-exchange cost measurable and small.
#pragma once

#include <coroutine>
#include <cstddef>
#include <exception>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>

namespace rc {
namespace detail {

void* allocate_frame(std::size_t size);
void free_frame(void* frame, std::size_t size) noexcept;

struct pooled_frame {
  static void* operator new(std::size_t size) { return allocate_frame(size); }
  static void operator delete(void* frame, std::size_t size) noexcept { free_frame(frame, size); }
};

struct task_promise_base : pooled_frame {
  std::coroutine_handle<> continuation = std::noop_coroutine();
  std::exception_ptr failure;

  std::suspend_always initial_suspend() noexcept { return {}; }
  struct final_awaiter {
    bool await_ready() noexcept { return false; }
    template <class Promise>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> self) noexcept {
      return self.promise().continuation;
    }
    void await_resume() noexcept {}
  };
  final_awaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { failure = std::current_exception(); }
};

}  // namespace detail

template <class T = void>
class [[nodiscard]] task {
 public:
  struct promise_type : detail::task_promise_base {
    std::optional<T> value;
    task get_return_object() { return task(std::coroutine_handle<promise_type>::from_promise(*this)); }
    template <class U>
    void return_value(U&& v) {
      value.emplace(std::forward<U>(v));
    }
  };

  task(task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  task& operator=(task&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  ~task() { reset(); }

  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
    handle_.promise().continuation = awaiting;
    return handle_;
  }
  T await_resume() {
    auto& p = handle_.promise();
    if (p.failure) std::rethrow_exception(p.failure);
    return std::move(*p.value);
  }

 private:
  explicit task(std::coroutine_handle<promise_type> h) : handle_(h) {}
  void reset() noexcept {
    if (handle_) handle_.destroy();
    handle_ = {};
  }
  std::coroutine_handle<promise_type> handle_;
};

template <>
class [[nodiscard]] task<void> {
 public:
  struct promise_type : detail::task_promise_base {
    task get_return_object() { return task(std::coroutine_handle<promise_type>::from_promise(*this)); }
    void return_void() noexcept {}
  };

  task(task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  task& operator=(task&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  ~task() { reset(); }

  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
    handle_.promise().continuation = awaiting;
    return handle_;
  }
  void await_resume() {
    if (handle_.promise().failure) std::rethrow_exception(handle_.promise().failure);
  }

 private:
  explicit task(std::coroutine_handle<promise_type> h) : handle_(h) {}
  void reset() noexcept {
    if (handle_) handle_.destroy();
    handle_ = {};
  }
  std::coroutine_handle<promise_type> handle_;
};

namespace detail {

/// A fire-and-forget coroutine: starts at once, frees its frame when done.
struct detached {
  struct promise_type : pooled_frame {
    detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }  // spawn() callers catch everything
  };
};

template <class F>
detached run_detached(F body) {
  co_await body();
}

}  // namespace detail

/// Starts `make()` (a callable returning task<void>) now, on this thread, detached. It runs until
/// its first suspension before spawn returns. The task must not throw: catch inside.
template <class F>
void spawn(F make) {
  detail::run_detached(std::move(make));
}

namespace detail {

/// The detached frames of one owner (a route) that have not finished. A forced stop abandons
/// runs suspended in a step that never finishes; nothing will resume them, so their owner frees
/// them with destroy_all() once nothing can run any more (the context's threads are gone).
/// Destroying a detached frame destroys the tasks it awaits, so the whole chain goes.
class frame_set {
 public:
  /// A local of the tracked coroutine: linked while the frame lives.
  class member {
   public:
    member(frame_set& set, std::coroutine_handle<> frame) : set_(&set), frame_(frame) { set.link(*this); }
    member(const member&) = delete;
    member& operator=(const member&) = delete;
    ~member() {
      if (set_) set_->unlink(*this);
    }

   private:
    friend class frame_set;
    frame_set* set_;
    std::coroutine_handle<> frame_;
    member* prev_ = nullptr;
    member* next_ = nullptr;
  };

  frame_set() = default;
  frame_set(const frame_set&) = delete;
  frame_set& operator=(const frame_set&) = delete;

  /// Destroys every frame still linked; returns how many. Only when none of them can be resumed.
  std::size_t destroy_all() noexcept {
    std::size_t n = 0;
    for (;;) {
      std::coroutine_handle<> frame;
      {
        std::lock_guard lock(mutex_);
        if (!head_) return n;
        member* m = head_;
        head_ = m->next_;
        if (head_) head_->prev_ = nullptr;
        m->set_ = nullptr;  // unlinked here: its destructor must not unlink again
        frame = m->frame_;
      }
      frame.destroy();
      ++n;
    }
  }

 private:
  void link(member& m) {
    std::lock_guard lock(mutex_);
    m.next_ = head_;
    if (head_) head_->prev_ = &m;
    head_ = &m;
  }
  void unlink(member& m) noexcept {
    std::lock_guard lock(mutex_);
    if (m.prev_)
      m.prev_->next_ = m.next_;
    else
      head_ = m.next_;
    if (m.next_) m.next_->prev_ = m.prev_;
  }

  std::mutex mutex_;
  member* head_ = nullptr;
};

/// `co_await this_frame{}` yields the awaiting coroutine's own handle, without suspending.
struct this_frame {
  std::coroutine_handle<> frame;
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) noexcept {
    frame = h;
    return false;
  }
  std::coroutine_handle<> await_resume() const noexcept { return frame; }
};

template <class F>
detached run_tracked(frame_set& set, F body) {
  frame_set::member tracked(set, co_await this_frame{});
  co_await body();
}

}  // namespace detail

/// spawn(), with the frame in `set` while it runs, so that its owner can free it if it is
/// abandoned (see detail::frame_set).
template <class F>
void spawn(detail::frame_set& set, F make) {
  detail::run_tracked(set, std::move(make));
}

}  // namespace rc
