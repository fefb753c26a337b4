// split_step: see rc/split.hpp.
#include "rc/split.hpp"

#include <coroutine>
#include <mutex>
#include <utility>

#include "rc/route.hpp"

namespace rc {

split_step::split_step(split_plan plan, std::vector<std::unique_ptr<step>> sub)
    : plan_(std::move(plan)), sub_(std::move(sub)) {}

split_step::~split_step() = default;

bool split_step::synchronous() const noexcept {
  // Asked again after a test kit swapped an endpoint inside (a double waits), so not cached.
  for (const auto& s : sub_)
    if (!s->synchronous()) return false;
  return true;
}

namespace {

// What every child of one split shares, computed once per split rather than per child.
struct child_shape {
  std::string correlation;
  nlohmann::json hierarchy;
};

child_shape shape_of(const exchange& parent, const std::string& group) {
  child_shape s{parent.correlation_id(), nlohmann::json::array()};
  if (const auto* h = parent.header(split_hierarchy_header); h != nullptr && h->is_array()) s.hierarchy = *h;
  s.hierarchy.push_back(group);
  return s;
}

exchange make_child_of(const exchange& parent, const child_shape& shape, any_body body) {
  exchange child;
  child.headers() = parent.headers();
  // A std::string key: from the string_view constant, g++ 12 warns (-Warray-bounds) on a copy it
  // believes overflows the small-string buffer.
  static const std::string key(split_hierarchy_header);
  child.set_header(key, shape.hierarchy);
  child.set_correlation_id(shape.correlation);
  if (parent.principal()) child.set_principal(*parent.principal());
  if (parent.deadline()) child.set_deadline(*parent.deadline());
  child.set_abort_signal(parent.abort_signal());
  child.set_route(parent.route());
  child.raw_body() = std::move(body);
  return child;
}

}  // namespace

exchange split_step::make_child(const exchange& parent, any_body body, const std::string& group) {
  return make_child_of(parent, shape_of(parent, group), std::move(body));
}

outcome split_step::run_now(exchange& ex, route_runtime& rt) {
  const bool agg = has_aggregate();
  auto source = plan_.open(ex, agg);
  const child_shape shape = shape_of(ex, ex.id());
  std::vector<any_body> arrived;
  any_body b;
  while (source->next(b)) {
    exchange child = make_child_of(ex, shape, std::move(b));
    const outcome o = rt.run_child_now(sub_, child);
    if (agg) arrived.push_back(o.ok() ? std::move(child.raw_body()) : any_body{});
  }
  if (agg) plan_.aggregate(ex, arrived);
  return outcome::proceed();
}

// One asynchronous split: the children in flight, the slots of those that arrived, and the
// parent waiting. Shared by the parent's frame and every child's (a child may end on another
// thread, and a forced stop may free the frames in any order).
struct split_step::run_state {
  run_state(split_step& s, route_runtime& r, exchange& p) : step(s), rt(r), parent(p), shape(shape_of(p, p.id())) {}

  split_step& step;
  route_runtime& rt;
  exchange& parent;  // lives in the parent's frame, which waits until every child has ended
  const child_shape shape;
  std::unique_ptr<split_source> source;
  bool aggregate = false;

  std::mutex mutex;
  std::vector<any_body> arrived;    // by split index, when aggregating
  std::size_t created = 0;          // children made so far
  std::size_t active = 0;           // children in flight
  bool exhausted = false;           // the source has no more
  bool pumping = false;             // someone is starting children (only one at a time)
  bool finished = false;            // every child has ended
  std::exception_ptr error;         // the source threw
  std::coroutine_handle<> waiting;  // the parent, once suspended

  // Starts children while slots are free. One caller at a time does it, in a loop rather than by
  // recursion: a child that ends at once (dropped by a filter before any wait) calls back in here,
  // finds someone pumping and returns, and the loop sees its slot free. Checking for more work and
  // giving up the pump happen under one lock, so a child ending meanwhile is never missed.
  static void pump(const std::shared_ptr<run_state>& self) {
    run_state& st = *self;
    std::unique_lock lock(st.mutex);
    if (st.pumping) return;
    st.pumping = true;
    while (!st.exhausted && st.active < st.step.plan_.parallelism) {
      any_body body;
      try {
        if (!st.source->next(body)) {
          st.exhausted = true;
          break;
        }
      } catch (...) {
        st.error = std::current_exception();
        st.exhausted = true;
        break;
      }
      const std::size_t index = st.created++;
      if (st.aggregate) st.arrived.emplace_back();
      ++st.active;
      lock.unlock();
      start(self, index, make_child_of(st.parent, st.shape, std::move(body)));
      lock.lock();
    }
    st.pumping = false;
    std::coroutine_handle<> wake;
    if (st.exhausted && st.active == 0 && !st.finished) {
      st.finished = true;
      wake = std::exchange(st.waiting, nullptr);
    }
    lock.unlock();
    if (wake) wake.resume();  // the last thing done here: the parent may free everything
  }

  static void start(const std::shared_ptr<run_state>& self, std::size_t index, exchange child) {
    rc::spawn(self->rt.frames(), [self, index, child = std::move(child)]() mutable -> task<void> {
      const outcome o = co_await self->rt.run_child(self->step.sub_, child);
      {
        std::lock_guard lock(self->mutex);
        if (self->aggregate && o.ok()) self->arrived[index] = std::move(child.raw_body());
        --self->active;
      }
      pump(self);
    });
  }

  struct wait_all {
    run_state& st;
    bool await_ready() noexcept {
      std::lock_guard lock(st.mutex);
      return st.finished;
    }
    bool await_suspend(std::coroutine_handle<> h) noexcept {
      std::lock_guard lock(st.mutex);
      if (st.finished) return false;
      st.waiting = h;
      return true;
    }
    void await_resume() const noexcept {}
  };
};

task<outcome> split_step::run(exchange& ex, route_runtime& rt) {
  auto st = std::make_shared<run_state>(*this, rt, ex);
  st->aggregate = has_aggregate();
  st->source = plan_.open(ex, st->aggregate);
  run_state::pump(st);
  co_await run_state::wait_all{*st};
  if (st->error) std::rethrow_exception(st->error);
  if (st->aggregate) plan_.aggregate(ex, st->arrived);
  co_return outcome::proceed();
}

}  // namespace rc
