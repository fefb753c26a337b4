#include "rc/events.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#if defined(__linux__) && __has_include(<linux/membarrier.h>) && !defined(__SANITIZE_THREAD__)
#define RC_HAVE_MEMBARRIER 1
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "rc/error.hpp"

namespace rc {
namespace {

constexpr std::string_view names[] = {
#define RC_EVENT_NAME(id, name) name,
    RC_EVENT_TABLE(RC_EVENT_NAME)
#undef RC_EVENT_NAME
};

using handler_list = std::vector<std::pair<std::uint64_t, std::shared_ptr<event_handler>>>;

// Registered component events. A name is written once, before `count` publishes it, and never
// changes: readers take `count` (acquire) and read the names below it without a lock.
struct registry {
  std::mutex mutex;  // writers
  std::array<std::string, max_component_events> names;
  std::atomic<std::size_t> count{0};
};

registry& registered() {
  static registry r;
  return r;
}

// ---- who is delivering ----
//
// A delivery marks itself in its thread's slot (a depth: deliveries nest when a handler emits)
// and then reads the lists. A writer that retired a list frees it only once it has seen every
// slot at zero. The order "mark, then read" on the reader's side against "publish, then scan" on
// the writer's is a store followed by a load on each side, which needs a full barrier on both.
// The reader's is the hot one, so it is made asymmetric: the writer (rare: subscribe and
// unsubscribe) calls membarrier(PRIVATE_EXPEDITED), which runs a full barrier on every thread of
// the process that is running, and the reader needs only a compiler barrier. Where membarrier is
// missing (and under ThreadSanitizer, which does not model it) the reader's mark is a seq_cst
// read-modify-write and the writer's scan seq_cst loads: the same guarantee, at the price of one
// locked instruction per delivery on each side.

struct reader_slot {
  std::atomic<std::uint32_t> depth{0};  // written by its thread only
};

struct reader_slots {
  std::mutex mutex;
  std::vector<reader_slot*> slots;  // every slot made; never freed
  std::vector<reader_slot*> free;   // given back by threads that ended, at depth zero
};

reader_slots& all_reader_slots() {
  static auto* r = new reader_slots;  // never destroyed: threads may end after static destruction
  return *r;
}

reader_slot* take_slot() {
  auto& r = all_reader_slots();
  std::lock_guard lock(r.mutex);
  if (!r.free.empty()) {
    reader_slot* s = r.free.back();
    r.free.pop_back();
    return s;
  }
  r.slots.push_back(new reader_slot);
  return r.slots.back();
}

bool asymmetric_barrier() noexcept {
#if defined(RC_HAVE_MEMBARRIER)
  static const bool ok = [] {
    const long cmds = ::syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (cmds < 0 || (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
    return ::syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  }();
  return ok;
#else
  return false;
#endif
}

// The writer's half, between its last publish and its scan of the slots. Without membarrier
// every access on both sides is seq_cst, which orders them by itself.
void heavy_barrier() noexcept {
#if defined(RC_HAVE_MEMBARRIER)
  if (!asymmetric_barrier()) return;
  if (::syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) return;
  // Registered, so this does not fail; if it ever did, the global command is the slow equivalent.
  (void)::syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0);
#endif
}

thread_local reader_slot* this_thread_slot = nullptr;  // trivial: the hot path reads it without a guard
thread_local bool slot_given_back = false;

// Gives the thread's slot back when the thread ends.
struct thread_slot_owner {
  reader_slot* slot = take_slot();
  ~thread_slot_owner() {
    this_thread_slot = nullptr;
    slot_given_back = true;
    auto& r = all_reader_slots();
    std::lock_guard lock(r.mutex);
    r.free.push_back(slot);
  }
};

reader_slot& my_slot() {
  if (this_thread_slot != nullptr) [[likely]]
    return *this_thread_slot;
  if (slot_given_back) {
    // A delivery from a thread-local destructor, after the owner's: a slot that stays taken.
    this_thread_slot = take_slot();
    return *this_thread_slot;
  }
  static thread_local thread_slot_owner owner;
  this_thread_slot = owner.slot;
  return *owner.slot;
}

// True when no thread is delivering (on any bus). Only after a heavy_barrier() that follows the
// caller's last publish does true prove that no delivery still reads a retired list; without
// one, false (someone is delivering) is still right, which is how collect() uses it.
bool no_reader() {
  auto& r = all_reader_slots();
  std::lock_guard lock(r.mutex);
  for (const reader_slot* s : r.slots)
    if (s->depth.load(std::memory_order_seq_cst) != 0) return false;
  return true;
}

}  // namespace

std::string_view event_name(event_id id) noexcept {
  const auto i = static_cast<std::size_t>(id);
  if (i < builtin_event_count) return names[i];
  auto& r = registered();
  const auto k = i - builtin_event_count;
  return k < r.count.load(std::memory_order_acquire) ? std::string_view(r.names[k]) : std::string_view();
}

std::optional<event_id> find_event(std::string_view name) noexcept {
  for (std::size_t i = 0; i < builtin_event_count; ++i)
    if (names[i] == name) return static_cast<event_id>(i);
  auto& r = registered();
  const std::size_t n = r.count.load(std::memory_order_acquire);
  for (std::size_t k = 0; k < n; ++k)
    if (r.names[k] == name) return static_cast<event_id>(builtin_event_count + k);
  return std::nullopt;
}

event_id register_event(std::string_view name) {
  if (name.empty() || name.find('*') != std::string_view::npos)
    throw error(errc::invalid_dsl, "register_event: \"" + std::string(name) + "\" is not an event name");
  if (auto id = find_event(name)) return *id;
  auto& r = registered();
  std::lock_guard lock(r.mutex);
  const std::size_t n = r.count.load(std::memory_order_relaxed);
  for (std::size_t k = 0; k < n; ++k)  // registered meanwhile by another thread
    if (r.names[k] == name) return static_cast<event_id>(builtin_event_count + k);
  if (n == max_component_events)
    throw error(errc::invalid_dsl, "register_event: more than " + std::to_string(max_component_events) +
                                       " component events (\"" + std::string(name) + "\")");
  r.names[n] = std::string(name);
  r.count.store(n + 1, std::memory_order_release);
  return static_cast<event_id>(builtin_event_count + n);
}

nlohmann::json event::to_json() const {
  return {{"ts", ts.str()}, {"contextId", context_id}, {"details", details.json()}, {"_event", name}};
}

// Shared between the bus and its subscriptions, so a subscription outliving the bus is harmless.
// Lists are copy-on-write and read without a lock: a delivery marks its thread's slot (above),
// then reads the current lists (`live`). A writer (under the mutex) publishes the new list and
// retires the old one; retired lists are freed only when no thread is delivering (checked by the
// writer, and by a delivery leaving its thread's outermost delivery while lists wait), so a list is
// never freed under a reader. A delivery thus costs a few plain loads and stores on its own
// thread's slot: no lock, no reference count, and (with membarrier) no locked instruction.
// The slots are the process's, not the bus's, so a delivery on another bus can hold back a
// retired list; it is then freed by this bus's next write or next delivery, or with the bus.
struct subscription::state {
  using list_ptr = std::shared_ptr<const handler_list>;

  std::mutex mutex;
  std::uint64_t next_token = 1;
  std::array<list_ptr, event_count + 1> lists;  // last = catch-all; owners, under the mutex
  std::array<std::atomic<const handler_list*>, event_count + 1> live{};
  std::atomic<bool> has_retired{false};
  std::vector<list_ptr> retired;  // under the mutex
  event_bus* bus = nullptr;

  // Under the mutex. Lists that can be freed go to `out`, to be destroyed after the lock (a
  // handler's destruction may unsubscribe: once() keeps its own subscription).
  void replace_locked(std::size_t i, list_ptr next, std::vector<list_ptr>& out) {
    live[i].store(next.get());
    if (list_ptr old = std::exchange(lists[i], std::move(next))) {  // the first list replaces none
      retired.push_back(std::move(old));
      has_retired.store(true);
    }
    collect_locked(out);
  }
  void collect_locked(std::vector<list_ptr>& out) {
    if (retired.empty()) return;
    heavy_barrier();
    if (!no_reader()) return;  // a delivery may hold one: it frees them as it leaves
    for (auto& l : retired) out.push_back(std::move(l));
    retired.clear();
    has_retired.store(false);
  }
  // Called by a delivery leaving its thread's outermost delivery while lists wait.
  // While another thread is still delivering it leaves the lists to that thread's exit, without
  // the barrier: a long handler elsewhere must not cost every other delivery a system call.
  void collect() {
    std::vector<list_ptr> out;
    {
      std::lock_guard lock(mutex);
      if (!no_reader()) return;
      collect_locked(out);
    }
  }
};

subscription::subscription(subscription&& o) noexcept : bus_(std::move(o.bus_)), token_(std::exchange(o.token_, 0)) {
  o.bus_.reset();
}

subscription& subscription::operator=(subscription&& o) noexcept {
  if (this != &o) {
    unsubscribe();
    bus_ = std::move(o.bus_);
    o.bus_.reset();
    token_ = std::exchange(o.token_, 0);
  }
  return *this;
}

void subscription::unsubscribe() {
  // Replaced lists are released after the lock: destroying the last copy of a handler may destroy
  // a subscription (once() keeps one for itself), whose unsubscribe takes the same lock.
  std::vector<std::shared_ptr<const handler_list>> retired;
  if (auto s = bus_.lock()) {
    std::lock_guard lock(s->mutex);
    for (std::size_t i = 0; i < s->lists.size(); ++i) {
      const auto& l = s->lists[i];
      if (!l) continue;
      auto it = std::find_if(l->begin(), l->end(), [&](const auto& e) { return e.first == token_; });
      if (it == l->end()) continue;
      auto copy = std::make_shared<handler_list>(*l);
      copy->erase(copy->begin() + (it - l->begin()));
      s->replace_locked(i, std::move(copy), retired);
    }
    if (s->bus) s->bus->refresh_flags_locked();
  }
  bus_.reset();
}

event_bus::event_bus(std::string context_id, std::function<time_point()> clock_now,
                     std::function<std::string(time_point)> render_ts)
    : context_id_(std::move(context_id)),
      now_(std::move(clock_now)),
      render_ts_(std::move(render_ts)),
      state_(std::make_shared<subscription::state>()) {
  state_->bus = this;
  // Registering for membarrier can wait for an RCU grace period once threads run: do it here,
  // usually before they do, rather than in the first subscribe. Kept: every delivery asks.
  light_readers_ = asymmetric_barrier();
}

event_bus::~event_bus() {
  std::lock_guard lock(state_->mutex);
  state_->bus = nullptr;
}

std::uint64_t event_bus::add(std::optional<event_id> id, event_handler h) {
  auto handler = std::make_shared<event_handler>(std::move(h));
  std::vector<std::shared_ptr<const handler_list>> retired;  // freed after the lock
  std::lock_guard lock(state_->mutex);
  const std::size_t i = id ? static_cast<std::size_t>(*id) : event_count;
  const auto& l = state_->lists[i];
  auto copy = l ? std::make_shared<handler_list>(*l) : std::make_shared<handler_list>();
  const std::uint64_t token = state_->next_token++;
  copy->emplace_back(token, std::move(handler));
  state_->replace_locked(i, std::move(copy), retired);
  refresh_flags_locked();
  return token;
}

void event_bus::refresh_flags_locked() {
  const auto& all = state_->lists[event_count];
  const bool catch_all = all && !all->empty();
  for (std::size_t i = 0; i < event_count; ++i) {
    const auto& l = state_->lists[i];
    any_[i].store(catch_all || (l && !l->empty()), std::memory_order_relaxed);
  }
}

subscription event_bus::on(std::string_view name, event_handler h) {
  std::optional<event_id> id;
  if (name != "*") {
    id = find_event(name);
    if (!id && name.find('*') != std::string_view::npos)
      throw error(errc::invalid_dsl, "event name \"" + std::string(name) +
                                         "\" is a pattern; only exact names and \"*\" are supported (identity is in "
                                         "the payload: use for_route() to filter by route)");
    if (!id)
      throw error(errc::invalid_dsl,
                  "unknown event name \"" + std::string(name) + "\"; subscribe to an exact event name or \"*\"");
  }
  return subscription(state_, add(id, std::move(h)));
}

subscription event_bus::once(std::string_view name, event_handler h) {
  // The wrapper removes itself before calling h, so h runs at most once even if h re-emits.
  auto self = std::make_shared<subscription>();
  auto fired = std::make_shared<std::atomic<bool>>(false);
  subscription sub = on(name, [self, fired, h = std::move(h)](const event& e) {
    if (fired->exchange(true)) return;
    self->unsubscribe();
    h(e);
  });
  // The caller's handle and the wrapper's own handle name the same token.
  *self = subscription(sub.bus_, sub.token_);
  return sub;
}

subscription event_bus::for_route(std::string route_id, event_handler h) {
  return on("*", [route_id = std::move(route_id), h = std::move(h)](const event& e) {
    const nlohmann::json& d = e.details;
    auto it = d.find("routeId");
    if (it != d.end() && it->is_string() && it->get_ref<const std::string&>() == route_id) h(e);
  });
}

// Snapshots the lists, fills the event (`fill` sets its details) and calls every handler.
template <class Fill>
[[gnu::always_inline]] inline void event_bus::deliver(event_id id, Fill&& fill) {
  subscription::state& st = *state_;
  reader_slot& slot = my_slot();
  const bool light = light_readers_;
  // Marked before the lists are read: a writer whose scan finds the slot at zero knows this
  // delivery reads the lists it published.
  const std::uint32_t depth = slot.depth.load(std::memory_order_relaxed);
  if (light) {
    slot.depth.store(depth + 1, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // heavy_barrier() is the other half
  } else {
    slot.depth.fetch_add(1, std::memory_order_seq_cst);
  }
  struct leave {
    subscription::state& st;
    reader_slot& slot;
    std::uint32_t depth;
    bool light;
    ~leave() {
      // Release: this delivery's reads of the lists come before a writer frees them.
      if (light) {
        slot.depth.store(depth, std::memory_order_release);
        std::atomic_signal_fence(std::memory_order_seq_cst);
      } else {
        slot.depth.fetch_sub(1, std::memory_order_seq_cst);
      }
      if (depth == 0 && st.has_retired.load()) st.collect();
    }
  } guard{st, slot, depth, light};
  const handler_list* exact = st.live[static_cast<std::size_t>(id)].load();
  const handler_list* all = st.live[event_count].load();
  if ((!exact || exact->empty()) && (!all || all->empty())) return;
  event ev;
  ev.id = id;
  const auto index = static_cast<std::size_t>(id);
  ev.name = index < builtin_event_count ? names[index] : event_name(id);  // the table's without a call
  ev.at.now_ = &now_;  // read when asked: most subscribers never look at the time
  ev.ts.at_ = &ev.at;  // rendered when read
  ev.ts.render_ = &render_ts_;
  ev.context_id = context_id_;
  fill(ev.details);
  for (const auto* l : {exact, all}) {
    if (!l) continue;
    for (const auto& [token, handler] : *l) {
      try {
        (*handler)(ev);
      } catch (...) {
        report_handler_failure(id, std::current_exception());
      }
    }
  }
}

void event_bus::dispatch(event_id id, nlohmann::json details) {
  deliver(id, [&](event_details& d) {
    d.json_.emplace(details.is_object() ? std::move(details) : nlohmann::json::object());
  });
}

void event_bus::dispatch_typed(event_id id, const void* value, const void* tag,
                               void (*write)(const void*, nlohmann::json&)) {
  deliver(id, [&](event_details& d) {
    d.typed_ = value;
    d.tag_ = tag;
    d.write_ = write;
  });
}

void event_details::render() const {
  nlohmann::json& j = json_.emplace(nlohmann::json::object());
  if (write_ != nullptr) write_(typed_, j);
  if (!j.is_object()) j = nlohmann::json::object();
}

void event_time::read() const {
  if (now_ != nullptr) t_ = (*now_)();
  read_ = true;
}

void event_timestamp::render() const {
  if (render_ != nullptr) text_ = (*render_)(at_ != nullptr ? at_->get() : time_point{});
  built_ = true;
}

namespace {
// Set while this thread delivers the report of a failing handler.
thread_local bool reporting_handler_failure = false;
}  // namespace

void event_bus::report_handler_failure(event_id id, std::exception_ptr e) {
  // Each failure is reported once, context:error handlers included. A handler that fails again on
  // the report itself (a throwing context:error or "*" handler) is not reported a second time:
  // that would recurse.
  if (reporting_handler_failure) return;
  reporting_handler_failure = true;
  struct done_reporting {
    ~done_reporting() { reporting_handler_failure = false; }
  } guard;
  try {
    const rc::error err = to_error(e);
    emit(event_id::context_error, [&] {
      return nlohmann::json{{"error", {{"code", err.code_string()}, {"message", err.message()}}},
                            {"event", std::string(event_name(id))},
                            {"source", "event-handler"}};
    });
  } catch (...) {  // out of memory building the report: the emitter must not see it
  }
}

}  // namespace rc
