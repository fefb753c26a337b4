#include "rc/error.hpp"

#include <fmt/format.h>

#include <cstring>
#include <thread>
#include <typeinfo>

namespace rc {
namespace {

struct code_entry {
  errc code;
  bool retryable;
  std::string_view meaning;
};

constexpr code_entry code_table[] = {
    {errc::no_usable_source, false, "registration: no usable source"},
    {errc::duplicate_route, false, "registration: duplicate route id"},
    {errc::context_stopped, false, "start() on a stopped context"},
    {errc::invalid_dsl, false, "invalid DSL use"},
    {errc::missing_from, false, "missing .from()"},
    {errc::route_aborted, false, "starting an aborted route"},
    {errc::step_failed, true, "step failed"},
    {errc::validation, false, "validation failed"},
    {errc::misconfigured, false, "misconfiguration"},
    {errc::no_direct_handler, false, "no handler on a direct endpoint"},
    {errc::connection_failed, true, "connection failed"},
    {errc::timed_out, true, "timeout"},
    {errc::rate_limited, true, "rate limited"},
    {errc::resource_not_accessible, false, "file or resource not found or not accessible"},
    {errc::source_parse_failed, false, "source parse failed"},
    {errc::circuit_open, false, "circuit breaker is open"},
    {errc::concurrency_limited, true, "concurrency limit exceeded"},
    {errc::cache_provider, true, "cache provider failed"},
    {errc::cache_key, false, "cache key derivation failed"},
    {errc::dropped_no_reply, false, "dropped, no reply"},
    {errc::unsupported_outcome, false, "unsupported step outcome"},
    {errc::dedupe_key, false, "dedupe key derivation failed"},
    {errc::dedupe_full, true, "dedupe key table full"},
    {errc::bad_shutdown_timeout, false, "bad shutdown timeout"},
    {errc::unknown, true, "unknown"},
};

const code_entry& entry_of(errc code) noexcept {
  for (const auto& e : code_table)
    if (e.code == code) return e;
  return code_table[std::size(code_table) - 1];
}

}  // namespace

std::string code_string(errc code) { return fmt::format("RC{}", static_cast<int>(code)); }
bool default_retryable(errc code) noexcept { return entry_of(code).retryable; }
std::string_view code_meaning(errc code) noexcept { return entry_of(code).meaning; }

error::error(errc code, std::string message) : error(code, std::move(message), default_retryable(code)) {}

error::error(errc code, std::string message, bool retryable, std::exception_ptr cause, nlohmann::json details)
    : code_(code),
      message_(std::move(message)),
      retryable_(retryable),
      cause_(std::move(cause)),
      details_(details.is_object() ? std::move(details) : nlohmann::json::object()),
      what_(fmt::format("{}: {}", rc::code_string(code_), message_)) {}

error::error(errc code, std::shared_ptr<const deferred> fields, bool retryable)
    : code_(code), retryable_(retryable), deferred_(std::move(fields)) {}

// A copy shares the (immutable) source and builds its own fields when read; built fields are
// copied as they are. The constructors set each member once, the assignments over what was
// there: an error is copied into every exception_ptr made of it (a gate's refusal: one per
// refused exchange).
error::error(const error& other)
    : std::exception(other), code_(other.code_), retryable_(other.retryable_), cause_(other.cause_) {
  copy_parts(other);
}

error::error(error&& other) noexcept
    : std::exception(other), code_(other.code_), retryable_(other.retryable_), cause_(std::move(other.cause_)) {
  take_parts(other);
}

error& error::operator=(const error& other) {
  if (this == &other) return *this;
  std::exception::operator=(other);
  code_ = other.code_;
  retryable_ = other.retryable_;
  cause_ = other.cause_;
  copy_parts(other);
  return *this;
}

error& error::operator=(error&& other) noexcept {
  if (this == &other) return *this;
  std::exception::operator=(other);
  code_ = other.code_;
  retryable_ = other.retryable_;
  cause_ = std::move(other.cause_);
  take_parts(other);
  return *this;
}

error::built_parts error::built_of(const error& other) noexcept {
  return {!other.deferred_ || other.message_state_.load(std::memory_order_acquire) == built,
          !other.deferred_ || other.details_state_.load(std::memory_order_acquire) == built};
}

void error::set_states(built_parts b) noexcept {
  message_state_.store(b.message && deferred_ ? built : unbuilt, std::memory_order_release);
  details_state_.store(b.details && deferred_ ? built : unbuilt, std::memory_order_release);
}

void error::copy_parts(const error& other) {
  const built_parts b = built_of(other);
  deferred_ = other.deferred_;
  if (b.message) {
    message_ = other.message_;
    what_ = other.what_;
  } else {
    message_.clear();
    what_.clear();
  }
  if (b.details)
    details_ = other.details_;
  else
    details_ = nullptr;
  set_states(b);
}

void error::take_parts(error& other) noexcept {
  const built_parts b = built_of(other);
  deferred_ = std::move(other.deferred_);
  message_ = std::move(other.message_);
  details_ = std::move(other.details_);
  what_ = std::move(other.what_);
  set_states(b);
}

// Builds one part of a deferred error, once: a transport may read every refusal's message, on
// every thread, so no lock is shared between errors. A thread that finds another one building
// waits for it (the build is short); if that build throws, the part is left unbuilt for the next
// reader to try.
template <class Build>
void error::build_once(std::atomic<std::uint8_t>& state, Build&& build) {
  for (;;) {
    std::uint8_t s = state.load(std::memory_order_acquire);
    if (s == built) return;
    if (s == unbuilt && state.compare_exchange_weak(s, building, std::memory_order_acquire)) break;
    std::this_thread::yield();
  }
  try {
    build();
  } catch (...) {
    state.store(unbuilt, std::memory_order_release);
    throw;
  }
  state.store(built, std::memory_order_release);
}

void error::build_message() const {
  build_once(message_state_, [this] {
    message_ = deferred_->message();
    what_ = fmt::format("{}: {}", rc::code_string(code_), message_);
  });
}

void error::build_details() const {
  build_once(details_state_, [this] {
    nlohmann::json d = deferred_->details();
    details_ = d.is_object() ? std::move(d) : nlohmann::json::object();
  });
}

const nlohmann::json* error::detail(std::string_view name) const {
  if (deferred_ && details_state_.load(std::memory_order_acquire) != built) {
    if (const nlohmann::json* field = deferred_->field(name)) return field;
    if (!deferred_->may_have(name)) return nullptr;
  }
  const nlohmann::json& d = details();
  const auto it = d.find(name);
  return it == d.end() ? nullptr : &*it;
}

const char* error::what() const noexcept {
  try {
    (void)message();
  } catch (...) {
    return "rc::error (its message could not be built)";
  }
  return what_.c_str();
}

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const error& err) {
    return err.message();
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown error";
  }
}

const error* error_of(const std::exception_ptr& e) noexcept {
  if (!e) return nullptr;
#if defined(__GLIBCXX__)
  // libstdc++'s exception_ptr is exactly a pointer to the thrown object (a stable ABI), and it
  // names the object's type without a rethrow. Exactly rc::error takes this path; a class derived
  // from it takes the portable one below.
  static_assert(sizeof(std::exception_ptr) == sizeof(void*));
  if (const std::type_info* type = e.__cxa_exception_type(); type && *type == typeid(error)) {
    void* object = nullptr;
    std::memcpy(&object, static_cast<const void*>(&e), sizeof object);
    return static_cast<const error*>(object);
  }
#endif
  try {
    std::rethrow_exception(e);
  } catch (const error& err) {
    return &err;  // the very object `e` holds: rethrow_exception does not copy it
  } catch (...) {
    return nullptr;
  }
}

error to_error(const std::exception_ptr& e) {
  if (const error* err = error_of(e)) return *err;
  try {
    std::rethrow_exception(e);
  } catch (const error& err) {
    return err;
  } catch (const std::exception& ex) {
    return error(errc::step_failed, ex.what(), true, e);
  } catch (...) {
    return error(errc::step_failed, "unknown error", true, e);
  }
}

std::exception_ptr normalise(const std::exception_ptr& e) {
  if (error_of(e)) return e;
  return std::make_exception_ptr(to_error(e));
}

void normalise_in_place(std::exception_ptr& e) {
  if (!error_of(e)) e = std::make_exception_ptr(to_error(e));
}

nlohmann::json error_json(const error& err, bool with_details) {
  nlohmann::json j = {{"code", err.code_string()}, {"message", err.message()}, {"retryable", err.retryable()}};
  if (with_details && !err.details().empty()) j["details"] = err.details();
  return j;
}

nlohmann::json error_json(const std::exception_ptr& e, bool with_details) {
  return error_json(to_error(e), with_details);
}

}  // namespace rc
