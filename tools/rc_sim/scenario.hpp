// rc-sim scenarios: the JSON a user writes, read into the engine's own option structs.
//
// Parsing checks only what JSON cannot say about a C++ type (a string where a number belongs, an
// unknown option, a malformed time, a negative count for an unsigned field). Every rule about an
// option's value is the engine's: build_route() (runner.hpp) hands the options to the builder,
// whose validate() throws RC5003, and the message is rewritten onto the JSON path
// (`gates[1].delay_after: must be ...`). One code path, the one the DSL uses.
//
// Times are milliseconds: a JSON number (fractions allowed) or a string with a unit ("250ms",
// "1.5s", "2m", "1h").
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <rc/step.hpp>
#include <rc/time.hpp>
#include <rc/wrappers/delay.hpp>
#include <rc/wrappers/rate_limit.hpp>
#include <rc/wrappers/retry.hpp>
#include <rc/wrappers/slow_down.hpp>
#include <rc/wrappers/throttle.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace rc::sim {

/// A scenario the tool refuses: `path` is the JSON path ("gates[1].delay_after"), `what()` the
/// whole line the user sees ("gates[1].delay_after: must be >= 0, got -1").
class scenario_error : public std::runtime_error {
 public:
  scenario_error(std::string path, const std::string& message)
      : std::runtime_error(path.empty() ? message : path + ": " + message), path_(std::move(path)) {}
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

enum class gate_kind : std::uint8_t { throttle, slow_down, rate_limit, retry, delay };
std::string_view to_string(gate_kind k) noexcept;

/// Which header a keyed gate reads: "client" is the traffic's `key` (rc::by_client()).
struct key_spec {
  enum class source : std::uint8_t { none, client, header } from = source::none;
  std::string header;        // source::header
  std::string text() const;  // "client", the header name, or "" when unkeyed
};

using gate_options =
    std::variant<throttle_options, retry_options, delay_options, slow_down_options, rate_limit_options>;

struct gate_spec {
  gate_kind kind;
  rc::scope scope;
  std::string path;   // "gates[1]"
  std::string label;  // the user's label, may be empty
  std::string name;   // what the outputs call it: the label, else the kind (numbered if repeated)
  key_spec key;
  // Windowed gates (slow_down, rate_limit), for the chart.
  duration window{};
  bool fixed_window = false;
  gate_options options;
};

struct traffic_spec {
  std::string path;  // "traffic[0]"
  duration at{};
  std::uint64_t count = 1;
  duration spacing{};
  std::string key;  // the client id, sent as routecraft.client
  std::optional<duration> client_timeout;
  std::vector<std::pair<std::string, std::string>> headers;
  std::uint32_t fail_first = 0;  // the downstream fails a request's first n attempts (503)
};

struct chart_spec {
  std::size_t max_rows = 240;  // more requests than this: the density view
};

struct scenario {
  std::string name;
  std::string description;
  std::vector<gate_spec> gates;
  duration service{};
  std::vector<traffic_spec> traffic;
  std::uint64_t seed = 1;
  chart_spec chart;

  std::uint64_t request_count() const noexcept;
};

/// Upper bound on requests per scenario (a request takes about 600 bytes of results).
inline constexpr std::uint64_t max_requests = 5'000'000;

/// Reads and checks a scenario. Throws scenario_error.
scenario parse_scenario(const nlohmann::json& doc, std::string default_name);
scenario load_scenario(const std::filesystem::path& file);

/// Milliseconds as the outputs print them, to the microsecond: "1500", "0.25", "1140.883" (integer
/// arithmetic only, so identical on every machine).
std::string format_ms(duration d);
inline std::string format_ms(time_point t) { return format_ms(t.time_since_epoch()); }

}  // namespace rc::sim
