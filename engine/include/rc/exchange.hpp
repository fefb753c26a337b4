// rc::exchange: one message travelling through a route.
//
// Identity (id, correlation id), headers (string keys, JSON values, kept in a small flat vector
// because most exchanges carry a handful), a type-erased body, an optional principal and
// deadline, and the limit information a gate attached for a transport to turn into headers.
//
// The body is held in a small-buffer `any_body`. The builder's static type guarantees which type
// is inside, so `body<T>()` does not check at run time (debug builds assert); `body_is<T>()` is
// there for the few places that cross a type boundary at run time (direct endpoints).
#pragma once

#include <cassert>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "rc/gates/rate_limit_numbers.hpp"
#include "rc/time.hpp"

namespace rc {

class cancel_signal;
class route_runtime;

/// Type-erased, move-only value with a 32-byte inline buffer.
class any_body {
 public:
  any_body() noexcept = default;
  template <class T, class D = std::decay_t<T>, class = std::enable_if_t<!std::is_same_v<D, any_body>>>
  any_body(T&& value) {  // NOLINT(google-explicit-constructor): bodies convert implicitly
    emplace<D>(std::forward<T>(value));
  }
  any_body(any_body&& other) noexcept { move_from(other); }
  any_body& operator=(any_body&& other) noexcept {
    if (this != &other) {
      reset();
      move_from(other);
    }
    return *this;
  }
  any_body(const any_body&) = delete;
  any_body& operator=(const any_body&) = delete;
  ~any_body() { reset(); }

  template <class T, class... Args>
  T& emplace(Args&&... args) {
    reset();
    if constexpr (fits_inline<T>) {
      auto* p = ::new (static_cast<void*>(buffer_)) T(std::forward<Args>(args)...);
      ops_ = &ops_for<T, true>;
      return *p;
    } else {
      auto* p = new T(std::forward<Args>(args)...);
      *reinterpret_cast<T**>(buffer_) = p;
      ops_ = &ops_for<T, false>;
      return *p;
    }
  }

  bool has_value() const noexcept { return ops_ != nullptr; }
  template <class T>
  bool holds() const noexcept {
    return ops_ && *ops_->type == typeid(T);
  }
  const std::type_info& type() const noexcept { return ops_ ? *ops_->type : typeid(void); }

  template <class T>
  T& get() noexcept {
    assert(holds<T>());
    if constexpr (fits_inline<T>)
      return *std::launder(reinterpret_cast<T*>(buffer_));
    else
      return **reinterpret_cast<T**>(buffer_);
  }
  template <class T>
  const T& get() const noexcept {
    return const_cast<any_body*>(this)->get<T>();
  }

  /// A copy of the value, when its type is copyable (tap, clones); an empty body otherwise.
  any_body clone() const {
    any_body out;
    if (ops_ && ops_->copy) {
      ops_->copy(out.buffer_, buffer_);
      out.ops_ = ops_;
    }
    return out;
  }
  /// The value as JSON when the type converts to JSON (log, events); null otherwise.
  nlohmann::json to_json() const { return ops_ && ops_->json ? ops_->json(buffer_) : nlohmann::json(); }
  /// Whether to_json() converts the value (false for an empty body or a type without to_json).
  bool converts_to_json() const noexcept { return ops_ && ops_->json; }

  void reset() noexcept {
    if (ops_) ops_->destroy(buffer_);
    ops_ = nullptr;
  }

 private:
  static constexpr std::size_t inline_size = 32;
  template <class T>
  static constexpr bool fits_inline =
      sizeof(T) <= inline_size && alignof(T) <= alignof(std::max_align_t) && std::is_nothrow_move_constructible_v<T>;

  struct ops {
    const std::type_info* type;
    void (*destroy)(unsigned char*) noexcept;
    void (*move)(unsigned char* dst, unsigned char* src) noexcept;
    void (*copy)(unsigned char* dst, const unsigned char* src);
    nlohmann::json (*json)(const unsigned char*);
  };

  template <class T, bool Inline>
  static T* ptr(unsigned char* b) noexcept {
    if constexpr (Inline)
      return std::launder(reinterpret_cast<T*>(b));
    else
      return *reinterpret_cast<T**>(b);
  }
  template <class T, bool Inline>
  static const T* cptr(const unsigned char* b) noexcept {
    return ptr<T, Inline>(const_cast<unsigned char*>(b));
  }

  template <class T, bool Inline>
  static constexpr auto copy_fn() -> void (*)(unsigned char*, const unsigned char*) {
    if constexpr (std::is_copy_constructible_v<T>) {
      return [](unsigned char* dst, const unsigned char* src) {
        if constexpr (Inline)
          ::new (static_cast<void*>(dst)) T(*cptr<T, true>(src));
        else
          *reinterpret_cast<T**>(dst) = new T(*cptr<T, false>(src));
      };
    } else {
      return nullptr;
    }
  }

  template <class T, bool Inline>
  static constexpr auto json_fn() -> nlohmann::json (*)(const unsigned char*) {
    if constexpr (std::is_constructible_v<nlohmann::json, const T&>) {
      return [](const unsigned char* b) { return nlohmann::json(*cptr<T, Inline>(b)); };
    } else {
      return nullptr;
    }
  }

  template <class T, bool Inline>
  static constexpr ops ops_for = {
      &typeid(T),
      [](unsigned char* b) noexcept {
        if constexpr (Inline)
          ptr<T, true>(b)->~T();
        else
          delete ptr<T, false>(b);
      },
      [](unsigned char* dst, unsigned char* src) noexcept {
        if constexpr (Inline) {
          ::new (static_cast<void*>(dst)) T(std::move(*ptr<T, true>(src)));
          ptr<T, true>(src)->~T();
        } else {
          *reinterpret_cast<T**>(dst) = *reinterpret_cast<T**>(src);
        }
      },
      copy_fn<T, Inline>(),
      json_fn<T, Inline>(),
  };

  void move_from(any_body& other) noexcept {
    if (other.ops_) {
      other.ops_->move(buffer_, other.buffer_);
      ops_ = std::exchange(other.ops_, nullptr);
    }
  }

  alignas(std::max_align_t) unsigned char buffer_[inline_size];
  const ops* ops_ = nullptr;
};

/// Header map: insertion-ordered, string keys, JSON values. Small and flat on purpose.
class header_map {
 public:
  using value_type = std::pair<std::string, nlohmann::json>;

  const nlohmann::json* find(std::string_view key) const noexcept {
    for (const auto& [k, v] : items_)
      if (k == key) return &v;
    return nullptr;
  }
  void set(std::string_view key, nlohmann::json value) {
    if (nlohmann::json* v = value_of(key))
      *v = std::move(value);
    else
      items_.emplace_back(std::string(key), std::move(value));
  }
  /// As set(key, text), but a string value already under `key` takes the text in its own
  /// storage: a map kept from one exchange to the next sets it again without allocating.
  void set_string(std::string_view key, std::string_view text) {
    nlohmann::json* v = value_of(key);
    if (v == nullptr)
      items_.emplace_back(std::string(key), std::string(text));
    else if (v->is_string())
      v->get_ref<std::string&>().assign(text);
    else
      *v = std::string(text);
  }
  bool erase(std::string_view key) {
    for (auto it = items_.begin(); it != items_.end(); ++it)
      if (it->first == key) {
        items_.erase(it);
        return true;
      }
    return false;
  }
  bool empty() const noexcept { return items_.empty(); }
  std::size_t size() const noexcept { return items_.size(); }
  auto begin() const noexcept { return items_.begin(); }
  auto end() const noexcept { return items_.end(); }
  nlohmann::json to_json() const;

 private:
  // find(), on a map this caller may change.
  nlohmann::json* value_of(std::string_view key) noexcept {
    return const_cast<nlohmann::json*>(std::as_const(*this).find(key));
  }
  std::vector<value_type> items_;
};

/// The limit information a gate attaches to an exchange (slow_down, rate_limit): numbers only. A
/// transport turns them into its own form (the HTTP source writes RateLimit / Retry-After headers,
/// rc/http_rate_limit_headers.hpp). Several gates may add entries.
struct limit_note {
  std::string gate;  // "rateLimit", "slowDown", "throttle"
  std::string label;
  std::uint64_t limit = 0;      // rateLimit: limit; slowDown: delay_after
  std::uint64_t used = 0;       // this exchange's hit number
  std::uint64_t remaining = 0;  // max(limit - used, 0)
  duration reset{};             // until the key's count next drops
  duration window{};
  std::string policy;  // the quota's name ("7-in-30sec" unless configured)
  std::string key;     // empty when the gate is not keyed
  duration delay{};    // slowDown: the delay served or refused
  bool rejected = false;
  duration retry_after{};                                     // when rejected
  rate_limit_headers header_mode = rate_limit_headers::none;  // rateLimit: the headers asked for
  std::int64_t wall_ms = 0;  // the wall clock when counted, epoch ms (set for legacy headers)
};

class exchange {
 public:
  exchange() : exchange(next_id()) {}
  explicit exchange(std::uint64_t id) : id_(id) {}
  exchange(exchange&&) noexcept = default;
  exchange& operator=(exchange&&) noexcept = default;

  // Identity.
  std::uint64_t id_number() const noexcept { return id_; }
  /// UUID-shaped text of the id ("3f2a...-..."), unique within the process.
  std::string id() const;
  /// The incoming correlation id if one was given, else this exchange's own id.
  std::string correlation_id() const { return extras_ && !extras_->correlation.empty() ? extras_->correlation : id(); }
  void set_correlation_id(std::string c) { more().correlation = std::move(c); }

  // Headers.
  const header_map& headers() const noexcept { return headers_; }
  header_map& headers() noexcept { return headers_; }
  const nlohmann::json* header(std::string_view key) const noexcept { return headers_.find(key); }
  /// The header as a string (a non-string JSON value is dumped), or `fallback` when absent.
  std::string header_or(std::string_view key, std::string_view fallback) const;
  void set_header(std::string_view key, nlohmann::json value) { headers_.set(key, std::move(value)); }

  // Body.
  template <class T>
  T& body() noexcept {
    return body_.get<T>();
  }
  template <class T>
  const T& body() const noexcept {
    return body_.get<T>();
  }
  any_body& raw_body() noexcept { return body_; }
  const any_body& raw_body() const noexcept { return body_; }
  template <class T>
  void set_body(T&& value) {
    body_.emplace<std::decay_t<T>>(std::forward<T>(value));
  }

  // Principal (who sent it), when a source knows.
  const std::optional<nlohmann::json>& principal() const noexcept { return extra().principal; }
  void set_principal(nlohmann::json p) { more().principal = std::move(p); }

  // Deadline: the caller will not wait past this engine time (issue: clients give up).
  const std::optional<time_point>& deadline() const noexcept { return extra().deadline; }
  void set_deadline(time_point t) { more().deadline = t; }

  /// Fired when nobody waits for this exchange any more (client disconnected). Waits in gates
  /// listen to it. Null when the source cannot tell.
  cancel_signal* abort_signal() const noexcept { return extra().abort; }
  void set_abort_signal(cancel_signal* s) {
    if (s || extras_) more().abort = s;
  }

  // Where it is: filled in by the executor for events.
  const route_runtime* route() const noexcept { return route_; }
  void set_route(const route_runtime* r) noexcept { route_ = r; }
  std::string_view operation() const noexcept { return operation_; }
  void set_operation(std::string_view op) noexcept { operation_ = op; }

  std::vector<limit_note>& limit_notes() { return more().limits; }
  const std::vector<limit_note>& limit_notes() const noexcept { return extra().limits; }

  /// Runs `f(succeeded)` when the run that carries this exchange ends (completed = true; failed or
  /// dropped = false). Route-scope gates use it to see the downstream outcome (rate_limit's
  /// skip_failed / skip_successful). Hooks run in registration order, once.
  void on_finish(std::function<void(bool succeeded)> f) { more().finish_hooks.push_back(std::move(f)); }
  void run_finish_hooks(bool succeeded) {
    if (!extras_ || extras_->finish_hooks.empty()) return;
    auto hooks = std::move(extras_->finish_hooks);
    extras_->finish_hooks.clear();
    for (auto& h : hooks) h(succeeded);
  }

  /// A deep copy with a fresh id and the same correlation (tap, multicast). The body is copied
  /// when its type is copyable.
  exchange clone() const;
  /// {id, headers, body} as JSON, for events that carry the exchange.
  nlohmann::json to_json() const;

  /// A fresh id: unique within the process; increasing within one thread, not across threads
  /// (each thread takes its ids from the shared counter 1,024 at a time).
  static std::uint64_t next_id() noexcept;
  /// `n` consecutive fresh ids; returns the first. One update of the shared counter for a whole
  /// batch (exchange(id) for each), so threads making exchanges at once do not fight over it.
  static std::uint64_t reserve_ids(std::size_t n) noexcept;

 private:
  // What most exchanges never use lives in one block allocated on first use. An exchange is
  // moved several times per run and parked in a coroutine frame while it waits: keeping it at
  // 112 bytes (not ~240) makes both cheap (rc-bench plain_seq, delay0).
  struct extras {
    std::string correlation;
    std::optional<nlohmann::json> principal;
    std::optional<time_point> deadline;
    cancel_signal* abort = nullptr;
    std::vector<limit_note> limits;
    std::vector<std::function<void(bool)>> finish_hooks;
  };
  // A finished exchange's block goes back to a small per-thread store, cleared but with its
  // buffers (a rate-limited request's note list, say), for the next exchange made on that thread:
  // an HTTP request through a rate_limit gate otherwise allocates and frees both every time.
  struct extras_release {
    void operator()(extras* e) const noexcept;
  };
  struct extras_store;
  static extras* take_extras();
  static const extras& no_extras() noexcept;
  const extras& extra() const noexcept { return extras_ ? *extras_ : no_extras(); }
  extras& more() {
    if (!extras_) extras_.reset(take_extras());
    return *extras_;
  }

  std::uint64_t id_;
  header_map headers_;
  any_body body_;
  const route_runtime* route_ = nullptr;
  std::string_view operation_ = "from";
  std::unique_ptr<extras, extras_release> extras_;
};

}  // namespace rc
