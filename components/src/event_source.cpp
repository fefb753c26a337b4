// The event source: a bus handler that filters and queues (on the emitter's thread), and a loop
// that runs one queued event at a time. The lineage registry is what stops event routes feeding
// on each other (see event_source.hpp).
#include "rc/event_source.hpp"

#include <fmt/format.h>

#include <optional>
#include <unordered_map>

#include "rc/context.hpp"
#include "rc/options.hpp"

namespace rc {

namespace {

// '*' matches any run of characters (':' included); everything else matches itself.
bool glob_match(std::string_view p, std::string_view s) {
  std::size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (pi < p.size() && p[pi] == s[si]) {
      ++pi;
      ++si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

std::vector<event_id> resolve(const std::vector<std::string>& patterns) {
  std::vector<event_id> ids;
  for (std::size_t i = 0; i < event_count; ++i) {
    const auto id = static_cast<event_id>(i);
    const std::string_view name = event_name(id);
    if (name.empty()) continue;
    bool match = patterns.empty();
    for (const auto& p : patterns) match = match || glob_match(p, name);
    if (match) ids.push_back(id);
  }
  return ids;
}

// Exchanges emitted by event sources and still running, by correlation id, with their depth.
// One per context.
struct event_lineage {
  explicit event_lineage(context&) {}
  std::mutex mutex;
  std::unordered_map<std::string, unsigned> depth;
};

thread_local bool emitting_overflow = false;

}  // namespace

struct event_source::state {
  event_source_options o;
  std::atomic<std::uint64_t> dropped{0};
  std::atomic<std::uint64_t> suppressed{0};

  std::mutex mutex;                                      // guards the rest
  std::deque<std::pair<event_message, unsigned>> queue;  // event, depth
  timer_wait* waiting = nullptr;                         // the source's wait, while it waits
  scheduler* clock = nullptr;
  event_bus* bus = nullptr;
  event_lineage* lineage = nullptr;
  std::string route_id;
  bool open = false;               // attached: events queue
  std::vector<subscription> subs;  // from attach() to the end of run()

  void on(const event& e) {
    std::string_view own;
    {
      std::lock_guard lock(mutex);
      if (!open) return;
      own = route_id;
    }
    const auto& d = e.details;
    if (auto it = d.find("routeId"); it != d.end() && it->is_string() && it->get_ref<const std::string&>() == own)
      return;
    unsigned depth = 1;
    if (auto it = d.find("correlationId"); it != d.end() && it->is_string()) {
      std::lock_guard lock(lineage->mutex);
      if (auto f = lineage->depth.find(it->get_ref<const std::string&>()); f != lineage->depth.end())
        depth = f->second + 1;
    }
    if (depth > o.max_depth) {
      suppressed.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (o.where && !o.where(e)) return;
    event_message m{std::string(e.name), e.details, e.at, e.ts};
    std::string lost;
    std::uint64_t total = 0;
    {
      std::lock_guard lock(mutex);
      if (!open) return;
      if (queue.size() >= o.queue_capacity) {
        total = dropped.fetch_add(1, std::memory_order_relaxed) + 1;
        if (o.overflow == event_overflow::drop_newest) {
          lost = m.name;
        } else {
          lost = queue.front().first.name;
          queue.pop_front();
        }
      }
      if (lost.empty() || o.overflow == event_overflow::drop_oldest) queue.emplace_back(std::move(m), depth);
      if (waiting) clock->reschedule(*waiting, clock->now());
    }
    if (!lost.empty() && !emitting_overflow) {
      emitting_overflow = true;  // an overflow this emit causes elsewhere only counts
      bus->emit(event_source_overflow, [&] {
        return nlohmann::json{{"routeId", own}, {"event", lost}, {"dropped", total}, {"capacity", o.queue_capacity}};
      });
      emitting_overflow = false;
    }
  }
};

event_source::event_source(event_source_options o) : st_(std::make_shared<state>()) {
  if (o.queue_capacity == 0) invalid_option("event", "queue_capacity", "at least 1", 0);
  if (o.max_depth == 0) invalid_option("event", "max_depth", "at least 1", 0);
  for (const auto& p : o.names)
    if (resolve({p}).empty())
      invalid_option("event", "names", "event names or `*` patterns that match an event", fmt::format("\"{}\"", p));
  st_->o = std::move(o);
}

std::uint64_t event_source::dropped() const noexcept { return st_->dropped.load(std::memory_order_relaxed); }
std::uint64_t event_source::suppressed() const noexcept { return st_->suppressed.load(std::memory_order_relaxed); }

void event_source::attach(route_runtime& rt) {
  state& st = *st_;
  event_lineage& lineage = rt.ctx().service<event_lineage>();
  {
    std::lock_guard lock(st.mutex);
    if (st.open) return;  // attached already (run() attaches a source nobody attached)
    st.route_id = rt.id();
    st.clock = &rt.clock();
    st.bus = &rt.events();
    st.lineage = &lineage;
    st.open = true;
  }
  std::vector<subscription> subs;
  const std::shared_ptr<state> keep = st_;  // handlers hold the state, whatever happens to the source
  for (event_id id : resolve(st.o.names))
    subs.push_back(rt.events().on(event_name(id), [keep](const event& e) { keep->on(e); }));
  std::lock_guard lock(st.mutex);
  st.subs = std::move(subs);
}

task<void> event_source::run(source_context& sc) {
  state& st = *st_;
  route_runtime& rt = sc.route();
  attach(rt);
  event_lineage& lineage = rt.ctx().service<event_lineage>();

  while (!sc.stopping()) {
    std::optional<std::pair<event_message, unsigned>> item;
    auto w = rt.clock().wait_queued(&rt.intake());
    {
      std::lock_guard lock(st.mutex);
      if (!st.queue.empty()) {
        item = std::move(st.queue.front());
        st.queue.pop_front();
      } else {
        st.waiting = &w.node;
      }
    }
    if (!item) {
      const wait_result r = co_await w.by_ref();
      std::lock_guard lock(st.mutex);
      st.waiting = nullptr;
      if (r == wait_result::cancelled) break;
      continue;
    }
    const unsigned depth = item->second;
    const std::string name = item->first.name;
    exchange ex = sc.make(std::move(item->first));
    ex.set_header("routecraft.event.name", name);
    ex.set_header("routecraft.event.depth", depth);
    const std::string corr = ex.correlation_id();
    {
      std::lock_guard lock(lineage.mutex);
      lineage.depth[corr] = depth;
    }
    (void)co_await sc.emit(std::move(ex));
    std::lock_guard lock(lineage.mutex);
    lineage.depth.erase(corr);
  }
  std::vector<subscription> subs;
  {
    std::lock_guard lock(st.mutex);
    subs = std::move(st.subs);
  }
  subs.clear();  // outside the lock: unsubscribing may destroy a handler, and the state it holds
  std::lock_guard lock(st.mutex);
  st.open = false;
  st.waiting = nullptr;
  st.queue.clear();
}

}  // namespace rc
