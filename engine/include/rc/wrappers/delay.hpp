// delay: waits a fixed time before the next step (step scope only). On shutdown the remaining
// wait is skipped (`cancelled: true`) and the step still runs. When the exchange's abort signal
// fires (the client went away, or an enclosing timeout's deadline passed) the wait ends too
// (`cancelled: true`) and the exchange is dropped ("client-gone") without running the step. A zero delay still yields
// to the executor once, like a zero timer: every exchange queued behind it gets to run first.
#pragma once

#include <memory>

#include "rc/options.hpp"
#include "rc/step.hpp"

namespace rc {

struct delay_options {
  duration delay{};
  void validate() const;
};

std::unique_ptr<step> make_delay(delay_options options, std::unique_ptr<step> inner);

}  // namespace rc
