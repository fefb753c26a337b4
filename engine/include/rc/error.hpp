// rc::error: every failure the engine reports is one of these, with a registered code.
//
// The codes and their default retryability live in one table (error.cpp); a raise site may give
// its own message (naming the option, the value and the rule) and structured `details` such as
// `retry_after_ms`, which transports read instead of parsing messages.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace rc {

enum class errc : int {
  no_usable_source = 1001,         // RC1001
  duplicate_route = 1002,          // RC1002
  context_stopped = 1004,          // RC1004
  invalid_dsl = 2001,              // RC2001
  missing_from = 2002,             // RC2002
  route_aborted = 3001,            // RC3001
  step_failed = 5001,              // RC5001
  validation = 5002,               // RC5002
  misconfigured = 5003,            // RC5003
  no_direct_handler = 5004,        // RC5004
  connection_failed = 5010,        // RC5010
  timed_out = 5011,                // RC5011
  rate_limited = 5013,             // RC5013
  resource_not_accessible = 5014,  // RC5014
  source_parse_failed = 5016,      // RC5016
  circuit_open = 5025,             // RC5025
  concurrency_limited = 5026,      // RC5026
  cache_provider = 5028,           // RC5028
  cache_key = 5029,                // RC5029
  dropped_no_reply = 5031,         // RC5031
  unsupported_outcome = 5032,      // RC5032
  dedupe_key = 5033,               // RC5033
  dedupe_full = 5034,              // RC5034
  bad_shutdown_timeout = 5058,     // RC5058
  unknown = 9901,                  // RC9901
};

/// "RC5013" for errc::rate_limited.
std::string code_string(errc code);
/// The table's default: may a retry help?
bool default_retryable(errc code) noexcept;
/// The table's short meaning of a code ("rate limited").
std::string_view code_meaning(errc code) noexcept;

class error : public std::exception {
 public:
  /// A raise site on a hot path (a gate's refusal) may defer its message and details: they are
  /// built once, on first read, from an immutable source: the message (with what()) when it is
  /// read, the details when they are. Every read sees exactly what an eager error would hold;
  /// detail() can answer single fields from the source, and names it lacks, without building the
  /// details.
  struct deferred {
    virtual ~deferred() = default;
    virtual std::string message() const = 0;
    virtual nlohmann::json details() const = 0;  // an object
    /// One field of details() if the source has it at hand (else null: details() is built).
    virtual const nlohmann::json* field(std::string_view) const noexcept { return nullptr; }
    /// False when details() surely has no such name: detail() answers null without building.
    virtual bool may_have(std::string_view) const noexcept { return true; }
  };

  error(errc code, std::string message);
  error(errc code, std::string message, bool retryable, std::exception_ptr cause = nullptr,
        nlohmann::json details = nlohmann::json::object());
  error(errc code, std::shared_ptr<const deferred> fields, bool retryable);
  error(const error& other);
  error(error&& other) noexcept;
  error& operator=(const error& other);
  error& operator=(error&& other) noexcept;
  ~error() override = default;

  errc code() const noexcept { return code_; }
  std::string code_string() const { return rc::code_string(code_); }
  const std::string& message() const {
    if (deferred_ && message_state_.load(std::memory_order_acquire) != built) build_message();
    return message_;
  }
  bool retryable() const noexcept { return retryable_; }
  const std::exception_ptr& cause() const noexcept { return cause_; }
  /// Structured fields for machines (retry_after_ms, limit, key, ...). Always an object.
  const nlohmann::json& details() const {
    materialise_details();
    return details_;
  }
  nlohmann::json& details() {
    materialise_details();
    return details_;
  }
  /// details()[name] or null when absent; a deferred error answers from its source when it can.
  const nlohmann::json* detail(std::string_view name) const;

  /// "RC5013: <message>"
  const char* what() const noexcept override;

 private:
  void materialise_details() const {
    if (deferred_ && details_state_.load(std::memory_order_acquire) != built) build_details();
  }
  void build_message() const;
  void build_details() const;
  // Which of an error's message and details are built (an eager error's always are); the
  // copy and move of the deferred source and those parts, with the states to match.
  struct built_parts {
    bool message;
    bool details;
  };
  static built_parts built_of(const error& other) noexcept;
  void set_states(built_parts b) noexcept;
  void copy_parts(const error& other);
  void take_parts(error& other) noexcept;
  template <class Build>
  static void build_once(std::atomic<std::uint8_t>& state, Build&& build);

  errc code_;
  mutable std::string message_;
  bool retryable_;
  std::exception_ptr cause_;
  mutable nlohmann::json details_;
  mutable std::string what_;
  std::shared_ptr<const deferred> deferred_;  // null for an eager error
  // A deferred error's message (with what_) and its details, each: not built, being built by one
  // thread (others wait for it), built.
  enum : std::uint8_t { unbuilt, building, built };
  mutable std::atomic<std::uint8_t> message_state_{unbuilt};
  mutable std::atomic<std::uint8_t> details_state_{unbuilt};
};

namespace detail {
template <class Fields>
class deferred_fields final : public error::deferred {
 public:
  explicit deferred_fields(Fields fields) : fields_(std::move(fields)) {}
  std::string message() const override { return fields_.message(); }
  nlohmann::json details() const override { return fields_.details(); }
  const nlohmann::json* field(std::string_view name) const noexcept override {
    if constexpr (requires { fields_.field(name); })
      return fields_.field(name);
    else
      return nullptr;
  }
  bool may_have(std::string_view name) const noexcept override {
    if constexpr (requires { fields_.may_have(name); })
      return fields_.may_have(name);
    else
      return true;
  }

 private:
  Fields fields_;
};
}  // namespace detail

/// An error whose message and details are built when first read, from `fields`: a value with
/// `std::string message() const` and `nlohmann::json details() const` (an object), and
/// optionally `const nlohmann::json* field(std::string_view) const noexcept` for the details it
/// can answer one by one and `bool may_have(std::string_view) const noexcept`, false for a name
/// its details never hold (a transport asking for one then builds nothing). For raise sites on a
/// hot path (a refusal, a fast failure) whose error is mostly let go unread: it costs one
/// allocation for `fields` instead of a formatted message and a JSON object. `fields` must own
/// what it reads: the error may outlive its raise site.
template <class Fields>
error deferred_error(errc code, bool retryable, Fields fields) {
  return error(code, std::make_shared<const detail::deferred_fields<Fields>>(std::move(fields)), retryable);
}

/// Turns any exception into an rc::error: rc::error passes through unchanged; anything else
/// becomes RC5001 (retryable) with the original message and the original as cause.
error to_error(const std::exception_ptr& e);
/// The rc::error `e` holds, or null when it holds anything else (or nothing). Valid while `e` is.
/// On libstdc++ it reads the held object without a rethrow, which costs an unwind (transports and
/// the executor look at every failure, and refusals are a hot path); elsewhere it rethrows.
const error* error_of(const std::exception_ptr& e) noexcept;
/// The error behind an exception_ptr, normalised, as an exception_ptr (cheap when already rc::error).
std::exception_ptr normalise(const std::exception_ptr& e);
/// normalise(e) into `e`, which is left untouched (not assigned a copy of itself) when it holds
/// an rc::error already, as a failure mostly does.
void normalise_in_place(std::exception_ptr& e);
/// The message of any exception ("unknown error" for non-std exceptions).
std::string message_of(const std::exception_ptr& e);
/// How events carry an error: {code, message, retryable}, plus `details` when it has any and
/// `with_details` is set.
nlohmann::json error_json(const error& err, bool with_details = true);
/// The same for any exception (normalised as to_error does).
nlohmann::json error_json(const std::exception_ptr& e, bool with_details = true);

}  // namespace rc
