#include "rc/log.hpp"

#include <fmt/format.h>

namespace rc {

void log_destination::send_now(exchange& ex, route_runtime& rt) {
  if (!out_ && !log_enabled(level_)) return;
  std::string line = log_line(rt, ex, body_log_text(ex));
  if (!prefix_.empty()) line = prefix_ + " " + line;
  if (out_)
    fmt::print(out_, "{}\n", line);
  else
    write_log(level_, line);
}

}  // namespace rc
