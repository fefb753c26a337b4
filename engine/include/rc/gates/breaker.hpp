// breaker: the circuit breaker's state machine, on plain time values (no clock, no locking:
// the wrapper serialises access).
//
// closed:    every call is admitted. A failure is remembered with its time; when `threshold`
//            failures fall within the sliding `window`, the breaker opens.
// open:      calls are refused until `cooldown` has passed since it opened; the first call after
//            that moves it to half-open.
// half-open: up to `half_open_max` calls are admitted as probes (the rest are refused). A probe
//            that succeeds closes the breaker (failure memory cleared); a probe that fails opens it
//            again (failure count 1). Outcomes of calls admitted before it left closed are ignored.
//
// Every admitted call holds a ticket naming the breaker's epoch (bumped on every state change) and
// whether it is a probe, so a late outcome from an earlier state cannot move the current one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "rc/time.hpp"

namespace rc {

struct breaker_params {
  int threshold = 1;
  duration window{};
  duration cooldown{};
  int half_open_max = 1;
};

class breaker {
 public:
  enum class state : std::uint8_t { closed, open, half_open };

  struct ticket {
    std::uint32_t epoch = 0;
    bool probe = false;
  };
  struct admission {
    bool admitted = false;
    bool became_half_open = false;  // this call moved open -> half-open
    ticket t;
    duration retry_after{};  // refused: time left in the cooldown (zero when half-open is full)
  };
  enum class transition : std::uint8_t { none, opened, closed };

  state current() const noexcept { return state_; }
  /// Failures remembered in the window (closed) or that opened it.
  int failure_count() const noexcept { return static_cast<int>(failures_.size()); }
  time_point opened_at() const noexcept { return opened_at_; }

  /// Admits or refuses a call at `now` (a closed breaker does not look at `now`).
  admission admit(time_point now, const breaker_params& p) {
    admission a;
    if (state_ == state::open) {
      const time_point until = opened_at_ + p.cooldown;
      if (now < until) {
        a.retry_after = until - now;
        return a;
      }
      enter(state::half_open);
      probes_ = 0;
      a.became_half_open = true;
    }
    if (state_ == state::half_open) {
      if (probes_ >= p.half_open_max) return a;  // refused, no cooldown left to wait
      ++probes_;
      a.admitted = true;
      a.t = {epoch_, true};
      return a;
    }
    a.admitted = true;
    a.t = {epoch_, false};
    return a;
  }

  /// The admitted call `t` ended well (or with an outcome that does not count as a failure).
  /// Only a probe's success changes anything.
  transition on_success(ticket t) {
    if (t.epoch != epoch_) return transition::none;
    if (state_ == state::half_open && t.probe) {
      enter(state::closed);
      failures_.clear();
      return transition::closed;
    }
    return transition::none;
  }

  /// The admitted call `t` failed at `now`.
  transition on_failure(ticket t, time_point now, const breaker_params& p) {
    if (t.epoch != epoch_) return transition::none;
    if (state_ == state::half_open) {
      if (!t.probe) return transition::none;
      failures_.assign(1, now);
      open(now);
      return transition::opened;
    }
    if (state_ != state::closed) return transition::none;
    // Forget failures that slid out of the window, then remember this one.
    const time_point horizon = now - p.window;
    failures_.erase(failures_.begin(),
                    std::find_if(failures_.begin(), failures_.end(), [&](time_point t0) { return t0 > horizon; }));
    failures_.push_back(now);
    if (static_cast<int>(failures_.size()) >= p.threshold) {
      open(now);
      return transition::opened;
    }
    return transition::none;
  }

  /// An idle closed breaker can be forgotten (keyed tables evict only these).
  bool idle(time_point now, const breaker_params& p) const noexcept {
    return state_ == state::closed && (failures_.empty() || failures_.back() <= now - p.window);
  }

 private:
  void enter(state s) noexcept {
    state_ = s;
    ++epoch_;
  }
  void open(time_point now) {
    enter(state::open);
    opened_at_ = now;
  }

  state state_ = state::closed;
  std::uint32_t epoch_ = 0;
  int probes_ = 0;
  time_point opened_at_{};
  std::vector<time_point> failures_;  // closed: failure times in the window, oldest first
};

inline const char* to_string(breaker::state s) noexcept {
  switch (s) {
    case breaker::state::closed:
      return "closed";
    case breaker::state::open:
      return "open";
    case breaker::state::half_open:
      return "half-open";
  }
  return "?";
}

}  // namespace rc
