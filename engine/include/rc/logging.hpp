// The log sink: one spdlog logger every log line of the library goes through (the .log() /
// .debug() steps, the rc::log() destination). Replace it with set_log_sink() (your own pattern,
// file, level, or a test's ringbuffer/ostream sink); the default writes each line as it is to
// stdout, at level info and above (so .debug() lines show only once the level is lowered:
// `rc::log_sink()->set_level(spdlog::level::debug)`).
//
// A line is "[<route id>] <exchange id> <text>": the route and the exchange it is about come
// first, whatever formats the text. Nothing is formatted for a level the logger leaves out.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "rc/exchange.hpp"

namespace spdlog {
class logger;
}

namespace rc {

class route_runtime;

enum class log_level : unsigned char { trace, debug, info, warn, error };

/// Replaces the logger (null: back to the default). A replaced logger stays alive until the process
/// ends, so a line being written on another thread at that moment never touches a freed one.
void set_log_sink(std::shared_ptr<spdlog::logger> logger);
/// The logger in use.
std::shared_ptr<spdlog::logger> log_sink();

/// Whether the logger in use lets a line of `level` through.
bool log_enabled(log_level level) noexcept;
/// Writes `line` through the logger at `level` (when it lets the level through).
void write_log(log_level level, std::string_view line);

/// "[route] exchange-id text": the line the library writes for an exchange.
std::string log_line(const route_runtime& rt, const exchange& ex, std::string_view text);
/// The body as log text: its JSON, or "<type>" for a body without a JSON conversion.
std::string body_log_text(const exchange& ex);

}  // namespace rc
