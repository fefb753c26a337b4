// choice_step, multicast_step: see rc/choice.hpp.
#include "rc/choice.hpp"

#include <utility>

#include "rc/context.hpp"
#include "rc/error.hpp"
#include "rc/route.hpp"

namespace rc {

namespace {
bool all_sync(const std::vector<std::unique_ptr<step>>& steps) noexcept {
  for (const auto& s : steps)
    if (!s->synchronous()) return false;
  return true;
}
}  // namespace

// The selection alone, for the wrappers written before choice() to wrap. It leaves its pick with
// the choice (by exchange id): a wrapper may suspend between the pick and the choice reading it.
class choice_step::select_step final : public step {
 public:
  explicit select_step(choice_step& owner) : owner_(owner) {}
  std::string_view operation() const override { return "choice"; }
  bool owns_events() const noexcept override { return true; }  // the choice itself gets the step events
  bool synchronous() const noexcept override { return true; }
  outcome run_now(exchange& ex, route_runtime& rt) override {
    const std::size_t pick = owner_.select(ex, rt);
    std::lock_guard lock(owner_.picks_mutex_);
    owner_.picks_[ex.id_number()] = pick;  // a retried selection overwrites its earlier pick
    return outcome::proceed();
  }

 private:
  choice_step& owner_;
};

choice_step::choice_step(std::vector<choice_branch> branches,
                         const std::function<std::unique_ptr<step>(std::unique_ptr<step>)>& wrap_selection)
    : branches_(std::move(branches)) {
  if (wrap_selection) selection_ = wrap_selection(std::make_unique<select_step>(*this));
}

choice_step::~choice_step() = default;

bool choice_step::synchronous() const noexcept {
  // Asked again after a test kit swapped an endpoint inside (a double waits), so not cached.
  if (selection_ && !selection_->synchronous()) return false;
  for (const auto& b : branches_)
    if (!all_sync(b.steps)) return false;
  return true;
}

std::size_t choice_step::select(const exchange& ex, route_runtime& rt) const {
  for (std::size_t i = 0; i < branches_.size(); ++i) {
    const choice_branch& b = branches_[i];
    bool taken = true;
    if (b.when) {
      try {
        taken = b.when(ex);
      } catch (...) {
        throw error(errc::step_failed, "Choice predicate threw: " + message_of(std::current_exception()), true,
                    std::current_exception());
      }
    }
    if (taken) {
      rt.events().emit(event_id::choice_matched, [&] {
        return nlohmann::json{{"routeId", rt.id()},
                              {"exchangeId", ex.id()},
                              {"correlationId", ex.correlation_id()},
                              {"branchIndex", i},
                              {"branchLabel", b.label}};
      });
      return i;
    }
  }
  rt.events().emit(event_id::choice_unmatched, [&] {
    return nlohmann::json{{"routeId", rt.id()}, {"exchangeId", ex.id()}, {"correlationId", ex.correlation_id()}};
  });
  return none;
}

std::size_t choice_step::take_pick(const exchange& ex) {
  std::lock_guard lock(picks_mutex_);
  const auto it = picks_.find(ex.id_number());
  if (it == picks_.end()) return none;  // e.g. an error() wrapper recovered from a throwing predicate
  const std::size_t pick = it->second;
  picks_.erase(it);
  return pick;
}

outcome choice_step::unmatched() const { return outcome::dropped("unmatched"); }

outcome choice_step::run_now(exchange& ex, route_runtime& rt) {
  std::size_t pick = none;
  if (selection_) {
    outcome o = run_now_guarded(*selection_, ex, rt);
    pick = take_pick(ex);
    if (!o.ok()) return o;
  } else {
    pick = select(ex, rt);
  }
  if (pick == none) return unmatched();
  return rt.run_steps_now(branches_[pick].steps, ex);
}

task<outcome> choice_step::run(exchange& ex, route_runtime& rt) {
  std::size_t pick = none;
  if (selection_) {
    outcome o = co_await run_guarded(*selection_, ex, rt);
    pick = take_pick(ex);
    if (!o.ok()) co_return o;
  } else {
    pick = select(ex, rt);
  }
  if (pick == none) co_return unmatched();
  co_return co_await rt.run_steps(branches_[pick].steps, ex);
}

multicast_step::multicast_step(std::vector<std::vector<std::unique_ptr<step>>> branches)
    : branches_(std::move(branches)) {}

multicast_step::~multicast_step() = default;

outcome multicast_step::run_now(exchange& ex, route_runtime& rt) {
  // The clones are made now, from the body as it is here; they start once the original has gone
  // on (posted), each as a run of its own that drain() and stop() count.
  auto clones = std::make_shared<std::vector<exchange>>();
  clones->reserve(branches_.size());
  for (std::size_t i = 0; i < branches_.size(); ++i) {
    clones->push_back(ex.clone());
    clones->back().set_operation("multicast");
  }
  context& ctx = rt.ctx();
  for (std::size_t i = 0; i < branches_.size(); ++i) ctx.work_started();
  ctx.post([this, &rt, &ctx, clones] {
    for (std::size_t i = 0; i < branches_.size(); ++i) {
      auto& steps = branches_[i];
      exchange clone = std::move((*clones)[i]);
      if (all_sync(steps)) {
        (void)rt.run_child_now(steps, clone);
        ctx.work_finished();
        continue;
      }
      // Runs until its first wait, then the next branch starts: the branches overlap.
      rc::spawn(rt.frames(), [&steps, &rt, &ctx, clone = std::move(clone)]() mutable -> task<void> {
        (void)co_await rt.run_child(steps, clone);
        ctx.work_finished();
      });
    }
  });
  return outcome::proceed();
}

}  // namespace rc
