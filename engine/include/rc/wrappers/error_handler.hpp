// error: catches the failure of the next step (step scope) or of the whole run, gates included
// (route scope), and hands it to a handler that decides what happens: a recovery body, a drop, a
// rethrow or a forward to another route (see rc/recovery.hpp).
//
// The handler gets the failure as an rc::error (plain exceptions normalised to RC5001) and the
// exchange. It may be a plain function returning rc::recovery or a coroutine returning
// rc::task<rc::recovery>. A handler that throws fails the exchange with what it threw (an
// rc::error unchanged, anything else as RC5001).
//
// Events: route:error-handler:invoked first; then route:error:caught (route scope, unless the
// failure goes on) and route:error-handler:recovered on a body, drop or forward;
// route:error-handler:failed on a rethrow or a throw.
#pragma once

#include <functional>
#include <memory>

#include "rc/error.hpp"
#include "rc/options.hpp"
#include "rc/recovery.hpp"
#include "rc/step.hpp"

namespace rc {

struct error_options {
  std::function<recovery(const error&, exchange&)> handler;
  std::function<task<recovery>(const error&, exchange&)> async_handler;  // one of the two
  void validate() const;
};

/// `body_type`: see body_type_slot (the builder passes it; unchecked when null).
std::unique_ptr<step> make_error_handler(error_options options, std::unique_ptr<step> inner, scope s,
                                         body_type_slot body_type = {});

namespace detail {
/// Runs a forward recovery: sets the error headers on `ex`, forwards it and returns the target's
/// final body. Throws the target's failure (RC5031 when it dropped).
task<any_body> forward_failed(forward_target& target, exchange& ex, route_runtime& rt, const error& err);
}  // namespace detail

}  // namespace rc
