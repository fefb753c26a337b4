// log(): one line per exchange on stdout: "[route] id body". noop(): discards.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string>

#include "rc/endpoint.hpp"

namespace rc {

class log_destination final : public destination_base {
 public:
  explicit log_destination(std::string prefix = {}, std::FILE* out = stdout) : prefix_(std::move(prefix)), out_(out) {}
  std::string_view adapter() const override { return "log"; }
  void send_now(exchange& ex, route_runtime& rt) override;

 private:
  std::string prefix_;
  std::FILE* out_;
};

inline log_destination log(std::string prefix = {}) { return log_destination(std::move(prefix)); }

class noop_destination final : public destination_base {
 public:
  std::string_view adapter() const override { return "noop"; }
  void send_now(exchange&, route_runtime&) override {}
};

inline noop_destination noop() { return {}; }

}  // namespace rc
