// choice and multicast: steps that hold sub-pipelines of their own.
//
// choice_step runs the first branch whose predicate holds (an otherwise branch always holds; the
// builder puts it last) on the exchange itself, then the route goes on after the choice. No
// branch holding drops the exchange ("unmatched"). A predicate that throws fails the exchange
// with RC5001. The selection emits route:operation:choice:matched {routeId, exchangeId,
// correlationId, branchIndex, branchLabel} or route:operation:choice:unmatched {routeId,
// exchangeId, correlationId}. A step-scope wrapper written before choice() wraps the selection
// only (the predicates): the chosen branch's steps run after it, outside the wrapper.
//
// multicast_step starts every branch on a clone of the exchange (deep-copied body, fresh id, the
// same correlation id, headers copied) and lets the original go on at once, unchanged. The
// clones run concurrently, each as an exchange of its own (route:exchange:started and a terminal
// event); a clone that fails or is dropped never affects the original or its siblings. drain()
// and stop() wait for the clones like for any run.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rc/exchange.hpp"
#include "rc/step.hpp"

namespace rc {

struct choice_branch {
  /// Whether the branch takes the exchange; empty for otherwise (always). May throw.
  std::function<bool(const exchange&)> when;
  std::string label;                         // branchLabel in events
  std::vector<std::unique_ptr<step>> steps;  // run on the exchange when chosen
};

/// Drops the exchange with reason "halted" (halt() in a branch).
class halt_step final : public step {
 public:
  std::string_view operation() const override { return "halt"; }
  bool synchronous() const noexcept override { return true; }
  outcome run_now(exchange&, route_runtime&) override { return outcome::dropped("halted"); }
};

class choice_step final : public step {
 public:
  /// `wrap_selection`, when given, wraps the selection (the step-scope wrappers written before
  /// choice()); the branches run outside it.
  choice_step(std::vector<choice_branch> branches,
              const std::function<std::unique_ptr<step>(std::unique_ptr<step>)>& wrap_selection = {});
  ~choice_step() override;

  std::string_view operation() const override { return "choice"; }
  bool synchronous() const noexcept override;
  outcome run_now(exchange& ex, route_runtime& rt) override;
  task<outcome> run(exchange& ex, route_runtime& rt) override;

  /// The branches (for the route's wrapper naming and test kits' endpoint doubles; only before
  /// the route runs).
  std::vector<choice_branch>& branches() noexcept { return branches_; }
  /// The wrapped selection, when a wrapper was written before choice(); null otherwise.
  std::unique_ptr<step>& selection() noexcept { return selection_; }

 private:
  class select_step;
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  /// The index of the first branch that takes `ex` (none: unmatched), with its event. Throws
  /// RC5001 when a predicate throws.
  std::size_t select(const exchange& ex, route_runtime& rt) const;
  /// After a wrapped selection: the branch it picked for `ex` (none when it picked none).
  std::size_t take_pick(const exchange& ex);
  outcome unmatched() const;

  std::vector<choice_branch> branches_;
  std::unique_ptr<step> selection_;  // a select_step inside the wrappers, when wrapped
  // A wrapped selection's pick, by exchange, until the choice reads it (a wrapper may suspend, so
  // the pick cannot travel on the stack).
  std::mutex picks_mutex_;
  std::unordered_map<std::uint64_t, std::size_t> picks_;
};

class multicast_step final : public step {
 public:
  explicit multicast_step(std::vector<std::vector<std::unique_ptr<step>>> branches);
  ~multicast_step() override;

  std::string_view operation() const override { return "multicast"; }
  bool synchronous() const noexcept override { return true; }  // it only starts the clones
  outcome run_now(exchange& ex, route_runtime& rt) override;

  std::vector<std::vector<std::unique_ptr<step>>>& branches() noexcept { return branches_; }

 private:
  std::vector<std::vector<std::unique_ptr<step>>> branches_;
};

}  // namespace rc
