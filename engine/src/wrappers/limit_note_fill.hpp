// A gate's limit note, added to its exchange in place: a note built aside and moved in costs a
// move of each of its strings on every exchange, where the exchange's note list (kept from one
// exchange to the next on a thread) usually has room already.
#pragma once

#include <string_view>

#include "rc/exchange.hpp"

namespace rc::detail {

/// The new note, its strings set and its numbers zero. A string that cannot be copied takes the
/// note out again: no half-made note stays on the exchange.
inline limit_note& add_limit_note(exchange& ex, std::string_view gate, std::string_view label, std::string_view policy,
                                  std::string_view key) {
  auto& notes = ex.limit_notes();
  limit_note& note = notes.emplace_back();
  try {
    note.gate = gate;
    note.label = label;
    note.policy = policy;
    note.key = key;
  } catch (...) {
    notes.pop_back();
    throw;
  }
  return note;
}

}  // namespace rc::detail
