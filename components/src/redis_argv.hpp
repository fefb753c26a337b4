// redis_argv(...): a Redis command's arguments as strings, for rc::redis_connection.
//
// Build the argv with this plain function into a named local before the co_await that sends it:
// g++ 12 cannot compile a braced list of string literals inside a coroutine ("array used as
// initializer"), and frees a temporary std::string twice when a co_await's full-expression holds
// one across the suspension.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace rc::detail {

template <class... A>
std::vector<std::string> redis_argv(A&&... a) {
  std::vector<std::string> v;
  v.reserve(sizeof...(a));
  (v.emplace_back(std::forward<A>(a)), ...);
  return v;
}

}  // namespace rc::detail
