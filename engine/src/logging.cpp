#include "rc/logging.hpp"

#include <fmt/format.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "rc/route.hpp"

namespace rc {
namespace {

std::shared_ptr<spdlog::logger> make_default_logger() {
  auto logger = std::make_shared<spdlog::logger>("routecraft", std::make_shared<spdlog::sinks::stdout_sink_mt>());
  logger->set_pattern("%v");  // the line as it is: what rc::log() has always printed
  logger->set_level(spdlog::level::info);
  return logger;
}

// The logger is read on every line and replaced rarely (start-up, tests): readers load a plain
// pointer, and every logger ever installed is owned here until exit.
struct sink_registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<spdlog::logger>> owned;  // the default first, then every replacement
  std::atomic<spdlog::logger*> current{nullptr};

  sink_registry() {
    owned.push_back(make_default_logger());
    current.store(owned.front().get(), std::memory_order_release);
  }
};

sink_registry& registry() {
  static sink_registry r;
  return r;
}

spdlog::level::level_enum to_spdlog(log_level level) noexcept {
  switch (level) {
    case log_level::trace:
      return spdlog::level::trace;
    case log_level::debug:
      return spdlog::level::debug;
    case log_level::info:
      return spdlog::level::info;
    case log_level::warn:
      return spdlog::level::warn;
    case log_level::error:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

}  // namespace

void set_log_sink(std::shared_ptr<spdlog::logger> logger) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  if (!logger) logger = r.owned.front();
  bool known = false;
  for (const auto& l : r.owned) known = known || l == logger;
  if (!known) r.owned.push_back(logger);
  r.current.store(logger.get(), std::memory_order_release);
}

std::shared_ptr<spdlog::logger> log_sink() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  spdlog::logger* current = r.current.load(std::memory_order_acquire);
  for (const auto& l : r.owned)
    if (l.get() == current) return l;
  return r.owned.front();
}

bool log_enabled(log_level level) noexcept {
  return registry().current.load(std::memory_order_acquire)->should_log(to_spdlog(level));
}

void write_log(log_level level, std::string_view line) {
  registry()
      .current.load(std::memory_order_acquire)
      ->log(to_spdlog(level), spdlog::string_view_t(line.data(), line.size()));
}

std::string log_line(const route_runtime& rt, const exchange& ex, std::string_view text) {
  return fmt::format("[{}] {} {}", rt.id(), ex.id(), text);
}

std::string body_log_text(const exchange& ex) {
  const any_body& body = ex.raw_body();
  if (body.converts_to_json()) return body.to_json().dump();
  return body.has_value() ? fmt::format("<{}>", body.type().name()) : std::string("null");
}

}  // namespace rc
