// Polling a condition that another thread (or process) makes true, for tests that cannot wait on
// it directly: a helper thread's work, a server's state.
#pragma once

#include <chrono>
#include <thread>

namespace rc::test {

/// Polls `done()` every `poll` until it holds or `limit` has passed (generous limits: a loaded
/// machine is slow, and a condition that holds returns at once); returns `done()`.
template <class Done>
bool eventually(std::chrono::steady_clock::duration limit, Done&& done,
                std::chrono::steady_clock::duration poll = std::chrono::microseconds(100)) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(poll);
  return done();
}

}  // namespace rc::test
