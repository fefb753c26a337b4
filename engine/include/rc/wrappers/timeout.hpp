// timeout: a deadline for the next step (step scope) or for each run of the route's pipeline
// (route scope, below retry: every attempt gets its own deadline).
//
// When the deadline passes the work inside is cancelled, not abandoned: the exchange's abort
// signal, as the work inside sees it, fires, so a throttle or concurrency wait, a delay, a retry
// backoff or an HTTP call in there ends at once and gives back what it held. The wrapper then
// fails with RC5011 (retryable), whatever the work returned after the deadline. Deadlines nest:
// the inner signal is linked to the enclosing one, so the earliest deadline wins, and a client
// disconnect still reaches the work inside. In route scope the executor schedules no further
// step once the deadline has passed, and a step that fails because of it reports no
// route:step:error of its own.
//
// A step that ignores the signal (a synchronous transform, a blocking call) cannot be stopped
// safely: it holds the exchange. Its result is then discarded when it returns late, and the
// RC5011 comes at that moment. Shutdown does not fire the deadline.
#pragma once

#include <memory>
#include <string>

#include "rc/options.hpp"
#include "rc/step.hpp"

namespace rc {

struct timeout_options {
  duration after{};   // required: >= 1ms
  std::string label;  // names the wrapper in its events and error

  void validate() const;
};

std::unique_ptr<step> make_timeout(timeout_options options, std::unique_ptr<step> inner, scope s);

}  // namespace rc
