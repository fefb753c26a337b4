// split / aggregate: one step that runs a part of the pipeline once per element of the body.
//
// The builder turns `.split(f) ... steps ... .aggregate(g)` into one split_step holding the steps
// in between (its sub-pipeline). Run on an exchange (the parent), it asks the plan for the
// children's bodies one at a time and runs each child as an exchange of its own (fresh id, the
// parent's correlation id, headers and principal, the split hierarchy header extended with the
// parent's id as group id) through the sub-pipeline, with its own route:exchange:started and
// terminal event. At most `parallelism` children are in flight; the next child is created only
// when one finishes, so a split of a long (or lazy) range holds `parallelism` children at a time.
// A child that fails or is dropped is reported as such and is simply missing from the aggregate;
// it never fails the parent. When every child has ended, the aggregate folds the bodies of the
// children that completed, in split order, into the parent's body; the parent (its id, headers,
// everything but the body untouched) then goes on. Without an aggregate the sub-pipeline is the
// rest of the route: the children run to its end and the parent completes after the last one.
//
// When every step of the sub-pipeline is synchronous the children run one after another inside
// the step (no coroutine, nothing concurrent to wait for); parallelism makes no difference then.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rc/exchange.hpp"
#include "rc/options.hpp"
#include "rc/step.hpp"

namespace rc {

/// The header listing the group ids of the splits a child comes from, outermost first (a JSON
/// array of strings). A group id is the id of the exchange that was split.
inline constexpr std::string_view split_hierarchy_header = "routecraft.split_hierarchy";

struct split_options {
  /// How many children run the steps between split() and aggregate() at once. 1 (the default)
  /// runs them one after another; raise it for children that wait (I/O, delays).
  std::size_t parallelism = 1;

  void validate() const {
    if (parallelism == 0) invalid_option("split", "parallelism", "at least 1", parallelism);
  }
};

/// The children's bodies, one at a time (children are made only as slots free).
class split_source {
 public:
  virtual ~split_source() = default;
  /// Puts the next child's body into `out`; false when there is none left. May throw.
  virtual bool next(any_body& out) = 0;
};

/// The typed parts of a split, supplied by the builder.
struct split_plan {
  std::size_t parallelism = 1;
  /// The children's bodies from the parent. `consume`: the parent's body is replaced by the
  /// aggregate afterwards, so its elements may be moved from.
  std::function<std::unique_ptr<split_source>(exchange& parent, bool consume)> open;
  /// Folds the bodies of the children that completed (split order; a slot without a value is a
  /// child that failed or was dropped) into the parent's body. May throw (the parent fails).
  /// Empty: no aggregate, the children run to the end of the route.
  std::function<void(exchange& parent, std::vector<any_body>& arrived)> aggregate;
};

class split_step final : public step {
 public:
  split_step(split_plan plan, std::vector<std::unique_ptr<step>> sub);
  ~split_step() override;

  std::string_view operation() const override { return "split"; }
  bool synchronous() const noexcept override;
  outcome run_now(exchange& ex, route_runtime& rt) override;
  task<outcome> run(exchange& ex, route_runtime& rt) override;

  bool has_aggregate() const noexcept { return static_cast<bool>(plan_.aggregate); }
  std::size_t parallelism() const noexcept { return plan_.parallelism; }
  /// The steps each child runs (for the route's wrapper naming and test kits' endpoint doubles;
  /// only before the route runs).
  std::vector<std::unique_ptr<step>>& sub_steps() noexcept { return sub_; }

  /// A child of `parent`: fresh id, the parent's correlation id, headers, principal, deadline and
  /// abort signal, the hierarchy extended with `group`, and `body`.
  static exchange make_child(const exchange& parent, any_body body, const std::string& group);

 private:
  struct run_state;

  split_plan plan_;
  std::vector<std::unique_ptr<step>> sub_;
};

}  // namespace rc
