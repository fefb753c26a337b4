// log(): one line per exchange through the log sink (rc/logging.hpp; by default stdout):
// "[route] id body", after an optional prefix. noop(): discards.
#pragma once

#include <cstdio>
#include <string>

#include "rc/endpoint.hpp"
#include "rc/logging.hpp"

namespace rc {

class log_destination final : public destination_base {
 public:
  explicit log_destination(std::string prefix = {}, log_level level = log_level::info)
      : prefix_(std::move(prefix)), level_(level) {}
  /// Writes straight to `out` instead of the log sink.
  log_destination(std::string prefix, std::FILE* out) : prefix_(std::move(prefix)), out_(out) {}
  std::string_view adapter() const override { return "log"; }
  void send_now(exchange& ex, route_runtime& rt) override;

 private:
  std::string prefix_;
  log_level level_ = log_level::info;
  std::FILE* out_ = nullptr;  // null: the log sink
};

inline log_destination log(std::string prefix = {}, log_level level = log_level::info) {
  return log_destination(std::move(prefix), level);
}

class noop_destination final : public destination_base {
 public:
  std::string_view adapter() const override { return "noop"; }
  void send_now(exchange&, route_runtime&) override {}
};

inline noop_destination noop() { return {}; }

}  // namespace rc
