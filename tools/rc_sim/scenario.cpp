#include "scenario.hpp"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <map>
#include <rc/keys.hpp>
#include <set>
#include <sstream>

#include "delay_expression.hpp"

namespace rc::sim {

std::string_view to_string(gate_kind k) noexcept {
  switch (k) {
    case gate_kind::throttle:
      return "throttle";
    case gate_kind::slow_down:
      return "slow_down";
    case gate_kind::rate_limit:
      return "rate_limit";
    case gate_kind::retry:
      return "retry";
    case gate_kind::delay:
      return "delay";
  }
  return "?";
}

std::string key_spec::text() const {
  switch (from) {
    case source::none:
      return "";
    case source::client:
      return "client";
    case source::header:
      return header;
  }
  return "";
}

std::uint64_t scenario::request_count() const noexcept {
  std::uint64_t n = 0;
  for (const auto& t : traffic) n += t.count;
  return n;
}

std::string format_ms(duration d) {
  const std::int64_t ns = d.count();
  const bool negative = ns < 0;
  // |INT64_MIN| does not fit: engine times never get there, but print something sane anyway.
  const std::uint64_t abs_ns = negative ? std::uint64_t(-(ns + 1)) + 1 : std::uint64_t(ns);
  const std::uint64_t us = abs_ns / 1000 + (abs_ns % 1000 >= 500 ? 1 : 0);  // to the microsecond
  std::string out = fmt::format("{}{}", negative && us != 0 ? "-" : "", us / 1000);
  if (const std::uint64_t frac = us % 1000; frac != 0) {
    std::string digits = fmt::format("{:03}", frac);
    while (digits.back() == '0') digits.pop_back();
    out += "." + digits;
  }
  return out;
}

namespace {

using json = nlohmann::json;

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Milliseconds to engine time; refuses what a 64-bit nanosecond count cannot hold.
duration from_ms(double ms, const std::string& path) {
  if (!std::isfinite(ms) || std::fabs(ms) > 9.0e12)
    throw scenario_error(path, fmt::format("must be a time within +-9e12 ms, got {}", ms));
  return duration(static_cast<std::int64_t>(std::llround(ms * 1e6)));
}

// "250ms", "1.5s", "2m", "1h", or a bare number of milliseconds.
std::optional<double> parse_time_text(const std::string& text) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' ||
                             (i == 0 && (text[i] == '-' || text[i] == '+'))))
    ++i;
  if (i == 0) return std::nullopt;
  const std::string number = text.substr(0, i);
  const std::string unit = text.substr(i);
  if (number.find_first_of("0123456789") == std::string::npos) return std::nullopt;
  std::istringstream in(number);
  in.imbue(std::locale::classic());
  double value = 0;
  if (!(in >> value) || !in.eof()) return std::nullopt;
  static const std::map<std::string, double> units = {{"", 1}, {"ms", 1}, {"s", 1e3}, {"m", 60e3}, {"h", 3600e3}};
  const auto it = units.find(unit);
  if (it == units.end()) return std::nullopt;
  return value * it->second;
}

/// Reads one JSON object, remembering which members were used, so that anything left over can be
/// refused as an unknown option with its path.
class object_reader {
 public:
  object_reader(const json& obj, std::string path) : obj_(obj), path_(std::move(path)) {
    if (!obj_.is_object()) throw scenario_error(path_, fmt::format("must be an object, got {}", shown(obj_)));
  }

  const std::string& path() const noexcept { return path_; }
  std::string at(std::string_view member) const {
    return path_.empty() ? std::string(member) : path_ + "." + std::string(member);
  }
  bool has(const std::string& member) {
    known_.insert(member);
    return obj_.contains(member) && !obj_.at(member).is_null();
  }
  const json& raw(const std::string& member) {
    known_.insert(member);
    return obj_.at(member);
  }

  std::optional<double> number(const std::string& member) {
    if (!has(member)) return std::nullopt;
    const json& v = obj_.at(member);
    if (!v.is_number()) throw scenario_error(at(member), fmt::format("must be a number, got {}", shown(v)));
    return v.get<double>();
  }

  std::optional<std::int64_t> integer(const std::string& member) {
    if (!has(member)) return std::nullopt;
    const json& v = obj_.at(member);
    if (v.is_number_integer()) return v.get<std::int64_t>();
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<std::int64_t>(d);
    }
    throw scenario_error(at(member), fmt::format("must be an integer, got {}", shown(v)));
  }

  /// An integer for an unsigned engine field: the sign is the only rule checked here.
  std::optional<std::uint64_t> count(const std::string& member) {
    auto v = integer(member);
    if (!v) return std::nullopt;
    if (*v < 0) throw scenario_error(at(member), fmt::format("must be >= 0, got {}", *v));
    return static_cast<std::uint64_t>(*v);
  }

  std::optional<duration> time(const std::string& member) {
    if (!has(member)) return std::nullopt;
    const json& v = obj_.at(member);
    std::optional<double> ms;
    if (v.is_number())
      ms = v.get<double>();
    else if (v.is_string())
      ms = parse_time_text(v.get<std::string>());
    if (!ms)
      throw scenario_error(at(member), fmt::format("malformed time {} (milliseconds, e.g. 1500, or a string "
                                                   "with a unit: \"250ms\", \"1.5s\", \"2m\", \"1h\")",
                                                   shown(v)));
    return from_ms(*ms, at(member));
  }

  std::optional<std::string> string(const std::string& member) {
    if (!has(member)) return std::nullopt;
    const json& v = obj_.at(member);
    if (!v.is_string()) throw scenario_error(at(member), fmt::format("must be a string, got {}", shown(v)));
    return v.get<std::string>();
  }

  std::optional<bool> boolean(const std::string& member) {
    if (!has(member)) return std::nullopt;
    const json& v = obj_.at(member);
    if (!v.is_boolean()) throw scenario_error(at(member), fmt::format("must be true or false, got {}", shown(v)));
    return v.get<bool>();
  }

  /// One of `choices`, as its index.
  template <std::size_t N>
  std::optional<std::size_t> choice(const std::string& member, const std::array<std::string_view, N>& choices) {
    auto s = string(member);
    if (!s) return std::nullopt;
    for (std::size_t i = 0; i < N; ++i)
      if (*s == choices[i]) return i;
    throw scenario_error(at(member), fmt::format("must be {}, got \"{}\"", one_of(choices), *s));
  }

  /// Refuses members nobody asked for (typos would otherwise be silently ignored).
  void reject_unknown(std::string_view what) const {
    for (const auto& [k, v] : obj_.items()) {
      if (known_.count(k)) continue;
      std::vector<std::string> names(known_.begin(), known_.end());
      throw scenario_error(at(k), fmt::format("unknown option for {} (known: {})", what, fmt::join(names, ", ")));
    }
  }

  template <std::size_t N>
  static std::string one_of(const std::array<std::string_view, N>& choices) {
    std::string out;
    for (std::size_t i = 0; i < N; ++i) {
      if (i > 0) out += i + 1 == N ? " or " : ", ";
      out += fmt::format("\"{}\"", choices[i]);
    }
    return out;
  }

 private:
  const json& obj_;
  std::string path_;
  std::set<std::string> known_;
};

key_spec read_key(object_reader& r) {
  auto k = r.string("key");
  if (!k) return {};
  if (k->empty()) throw scenario_error(r.at("key"), "must be \"client\" or a header name, got \"\"");
  if (*k == "client") return {key_spec::source::client, {}};
  return {key_spec::source::header, *k};
}

key_selector selector(const key_spec& k) {
  switch (k.from) {
    case key_spec::source::none:
      return {};
    case key_spec::source::client:
      return rc::by_client();
    case key_spec::source::header:
      return rc::by_header(k.header);
  }
  return {};
}

per read_per(object_reader& r) {
  static constexpr std::array<std::string_view, 4> names = {"second", "minute", "hour", "day"};
  static constexpr std::array<per, 4> values = {per::second, per::minute, per::hour, per::day};
  auto i = r.choice("per", names);
  return i ? values[*i] : per::second;
}

void read_counting(object_reader& r, gate_spec& g) {
  static constexpr std::array<std::string_view, 2> names = {"sliding", "fixed"};
  auto i = r.choice("counting", names);
  g.fixed_window = i && *i == 1;
}

throttle_options read_throttle(object_reader& r, gate_spec& g) {
  throttle_options o;
  if (auto v = r.number("rate")) o.rate = *v;
  o.per = read_per(r);
  static constexpr std::array<std::string_view, 2> modes = {"delay", "reject"};
  if (auto m = r.choice("mode", modes)) o.mode = *m == 0 ? throttle_mode::delay : throttle_mode::reject;
  if (auto v = r.number("burst")) o.burst = *v;
  if (auto v = r.count("max_keys")) o.max_keys = *v;
  if (auto v = r.time("max_wait_ms")) o.max_wait = *v;
  if (auto v = r.count("max_queue")) o.max_queue = *v;
  o.label = g.label;
  o.key = selector(g.key);
  return o;
}

retry_options read_retry(object_reader& r) {
  retry_options o;
  if (auto v = r.integer("max_attempts")) {
    if (*v > std::numeric_limits<int>::max() || *v < std::numeric_limits<int>::min())
      throw scenario_error(r.at("max_attempts"), fmt::format("must fit an int, got {}", *v));
    o.max_attempts = static_cast<int>(*v);
  }
  if (auto v = r.time("backoff_ms")) o.backoff = *v;
  if (auto v = r.number("factor")) o.factor = *v;
  if (auto v = r.time("max_backoff_ms")) o.max_backoff = *v;
  if (r.has("jitter")) {
    const json& j = r.raw("jitter");
    if (j == "none")
      o.jitter = rc::jitter::none;
    else if (j == "full")
      o.jitter = rc::jitter::full;
    else if (j.is_number())
      o.jitter = j.get<double>();
    else
      throw scenario_error(r.at("jitter"), fmt::format("must be \"none\", \"full\" or a number, got {}", shown(j)));
  }
  return o;
}

delay_options read_delay(object_reader& r) {
  delay_options o;
  if (auto v = r.time("delay_ms")) o.delay = *v;
  return o;
}

slow_down_options read_slow_down(object_reader& r, gate_spec& g) {
  slow_down_options o;
  if (auto v = r.time("window_ms")) o.window = *v;
  if (auto v = r.integer("delay_after")) o.delay_after = *v;
  if (r.has("delay_ms")) {
    const json& d = r.raw("delay_ms");
    if (d.is_string() && !parse_time_text(d.get<std::string>())) {
      o.delay = delay_expression(d.get<std::string>(), r.at("delay_ms"));  // "(hits - 3)^2 * 1000"
    } else if (auto v = r.time("delay_ms")) {
      o.delay = *v;  // a constant: every hit past delay_after waits this long
    }
  }
  if (auto v = r.time("max_delay_ms")) o.max_delay = *v;
  read_counting(r, g);
  o.counting = g.fixed_window ? counting::fixed : counting::sliding;
  if (auto v = r.count("max_keys")) o.max_keys = *v;
  o.label = g.label;
  o.key = selector(g.key);
  g.window = o.window;
  return o;
}

rate_limit_options read_rate_limit(object_reader& r, gate_spec& g) {
  rate_limit_options o;
  if (auto v = r.integer("limit")) o.limit = *v;
  if (auto v = r.time("window_ms")) o.window = *v;
  read_counting(r, g);
  o.counting = g.fixed_window ? counting::fixed : counting::sliding;
  if (auto v = r.count("max_keys")) o.max_keys = *v;
  if (auto v = r.string("message")) o.message = *v;
  if (auto v = r.integer("status")) o.status = static_cast<int>(std::clamp<std::int64_t>(*v, -1, 100000));
  if (auto v = r.string("policy")) o.policy = *v;
  if (auto v = r.boolean("skip_failed")) o.skip_failed = *v;
  if (auto v = r.boolean("skip_successful")) o.skip_successful = *v;
  if (r.has("headers")) {
    // "draft-6", "legacy", "none", or a list to combine: ["draft-7", "legacy"].
    static constexpr std::array<std::string_view, 5> names = {"none", "draft-6", "draft-7", "draft-8", "legacy"};
    static constexpr std::array<rate_limit_headers, 5> values = {
        rate_limit_headers::none, rate_limit_headers::draft_6, rate_limit_headers::draft_7, rate_limit_headers::draft_8,
        rate_limit_headers::legacy};
    const json& h = r.raw("headers");
    auto one = [&](const json& v, const std::string& path) {
      if (v.is_string())
        for (std::size_t i = 0; i < names.size(); ++i)
          if (v == names[i]) return values[i];
      throw scenario_error(path, fmt::format("must be {}, got {}", object_reader::one_of(names), shown(v)));
    };
    o.headers = rate_limit_headers::none;
    if (h.is_array()) {
      for (std::size_t i = 0; i < h.size(); ++i)
        o.headers = o.headers | one(h[i], fmt::format("{}[{}]", r.at("headers"), i));
    } else {
      o.headers = one(h, r.at("headers"));
    }
  }
  o.label = g.label;
  o.key = selector(g.key);
  g.window = o.window;
  return o;
}

gate_spec read_gate(const json& j, std::size_t index) {
  gate_spec g;
  g.path = fmt::format("gates[{}]", index);
  object_reader r(j, g.path);
  static constexpr std::array<std::string_view, 5> kinds = {"throttle", "slow_down", "rate_limit", "retry", "delay"};
  auto gate = r.string("gate");
  if (!gate)
    throw scenario_error(r.at("gate"), fmt::format("missing: name the gate ({})", object_reader::one_of(kinds)));
  bool known = false;
  for (auto k : kinds) known = known || *gate == k;
  if (!known)
    throw scenario_error(r.at("gate"),
                         fmt::format("unknown gate \"{}\" (expected {})", *gate, object_reader::one_of(kinds)));
  g.kind = *gate == "throttle"     ? gate_kind::throttle
           : *gate == "slow_down"  ? gate_kind::slow_down
           : *gate == "rate_limit" ? gate_kind::rate_limit
           : *gate == "retry"      ? gate_kind::retry
                                   : gate_kind::delay;
  static constexpr std::array<std::string_view, 2> scopes = {"route", "step"};
  auto s = r.choice("scope", scopes);
  g.scope = s && *s == 0 ? rc::scope::route : rc::scope::step;
  if (auto l = r.string("label")) g.label = *l;

  switch (g.kind) {
    case gate_kind::throttle:
      g.key = read_key(r);
      g.options = read_throttle(r, g);
      break;
    case gate_kind::retry:
      g.options = read_retry(r);
      break;
    case gate_kind::delay:
      g.options = read_delay(r);
      break;
    case gate_kind::slow_down:
      g.key = read_key(r);
      g.options = read_slow_down(r, g);
      break;
    case gate_kind::rate_limit:
      g.key = read_key(r);
      g.options = read_rate_limit(r, g);
      break;
  }
  r.reject_unknown(*gate);
  return g;
}

traffic_spec read_traffic(const json& j, std::size_t index) {
  traffic_spec t;
  t.path = fmt::format("traffic[{}]", index);
  object_reader r(j, t.path);
  auto at = r.time("at_ms");
  if (!at) throw scenario_error(r.at("at_ms"), "missing: when the first request of this entry arrives");
  if (*at < duration::zero()) throw scenario_error(r.at("at_ms"), fmt::format("must be >= 0, got {}", format_ms(*at)));
  t.at = *at;
  if (auto c = r.integer("count")) {
    if (*c < 1) throw scenario_error(r.at("count"), fmt::format("must be an integer >= 1, got {}", *c));
    t.count = static_cast<std::uint64_t>(*c);
  }
  if (auto s = r.time("spacing_ms")) {
    if (*s < duration::zero())
      throw scenario_error(r.at("spacing_ms"), fmt::format("must be >= 0, got {}", format_ms(*s)));
    t.spacing = *s;
  }
  if (auto k = r.string("key")) t.key = *k;
  if (auto c = r.time("client_timeout_ms")) {
    if (*c <= duration::zero())
      throw scenario_error(r.at("client_timeout_ms"), fmt::format("must be > 0, got {}", format_ms(*c)));
    t.client_timeout = *c;
  }
  if (r.has("headers")) {
    object_reader h(r.raw("headers"), r.at("headers"));
    for (const auto& [name, value] : r.raw("headers").items()) {
      auto v = h.string(name);
      if (name.rfind("routecraft.", 0) == 0)
        throw scenario_error(h.at(name), "engine header (routecraft.*): set the client id with `key`");
      t.headers.emplace_back(name, v.value_or(""));
    }
  }
  if (auto f = r.count("fail_first")) {
    if (*f > 1000) throw scenario_error(r.at("fail_first"), fmt::format("must be <= 1000, got {}", *f));
    t.fail_first = static_cast<std::uint32_t>(*f);
  }
  const auto last = static_cast<double>(t.at.count()) + static_cast<double>(t.spacing.count()) * double(t.count - 1);
  if (last > 9.0e18)
    throw scenario_error(t.path, "the last request would arrive past the end of engine time (~292 years)");
  r.reject_unknown("a traffic entry");
  return t;
}

// Names the outputs use: the label if given, else the kind, numbered when a kind repeats.
void name_gates(std::vector<gate_spec>& gates) {
  std::map<gate_kind, int> total, seen;
  for (const auto& g : gates)
    if (g.label.empty()) ++total[g.kind];
  std::set<std::string> used;
  for (auto& g : gates) {
    if (!g.label.empty()) {
      g.name = g.label;
    } else {
      const int n = ++seen[g.kind];
      g.name = total[g.kind] > 1 ? fmt::format("{}#{}", to_string(g.kind), n) : std::string(to_string(g.kind));
    }
    if (!used.insert(g.name).second)
      throw scenario_error(
          g.path + ".label",
          fmt::format("\"{}\" names another gate too; labels tell gates apart in the outputs", g.name));
  }
}

}  // namespace

scenario parse_scenario(const json& doc, std::string default_name) {
  scenario s;
  object_reader r(doc, "");
  s.name = r.string("name").value_or(std::move(default_name));
  s.description = r.string("description").value_or("");
  if (r.has("gates")) {
    const json& gates = r.raw("gates");
    if (!gates.is_array()) throw scenario_error("gates", fmt::format("must be an array, got {}", shown(gates)));
    if (gates.size() > 1000) throw scenario_error("gates", fmt::format("{} gates: at most 1000", gates.size()));
    for (std::size_t i = 0; i < gates.size(); ++i) s.gates.push_back(read_gate(gates[i], i));
  }
  name_gates(s.gates);
  if (auto v = r.time("service_ms")) {
    if (*v < duration::zero()) throw scenario_error("service_ms", fmt::format("must be >= 0, got {}", format_ms(*v)));
    s.service = *v;
  }
  if (!r.has("traffic")) throw scenario_error("traffic", "missing: the requests to send (at least one entry)");
  const json& traffic = r.raw("traffic");
  if (!traffic.is_array() || traffic.empty())
    throw scenario_error("traffic", fmt::format("must be a non-empty array, got {}", shown(traffic)));
  for (std::size_t i = 0; i < traffic.size(); ++i) s.traffic.push_back(read_traffic(traffic[i], i));
  if (s.request_count() > max_requests)
    throw scenario_error("traffic",
                         fmt::format("{} requests: at most {} per scenario", s.request_count(), max_requests));
  if (auto v = r.count("seed")) s.seed = *v;
  if (r.has("chart")) {
    object_reader c(r.raw("chart"), "chart");
    if (auto m = c.count("max_rows")) {
      if (*m < 1) throw scenario_error("chart.max_rows", "must be >= 1, got 0");
      s.chart.max_rows = *m;
    }
    c.reject_unknown("chart");
  }
  r.reject_unknown("a scenario");

  // A gate keyed by a header nobody sends puts every request under one key: almost surely a typo.
  for (const auto& g : s.gates) {
    if (g.key.from != key_spec::source::header) continue;
    bool sent = false;
    for (const auto& t : s.traffic)
      for (const auto& [name, value] : t.headers) sent = sent || name == g.key.header;
    if (!sent)
      throw scenario_error(g.path + ".key",
                           fmt::format("no traffic entry sends header \"{}\" (add it to traffic[].headers, "
                                       "or use \"client\" for the traffic's key)",
                                       g.key.header));
  }
  return s;
}

scenario load_scenario(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw scenario_error("", "cannot read the file");
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::parse_error& e) {
    // nlohmann's message carries the line and column.
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    throw scenario_error("", fmt::format("not valid JSON: {}", what));
  }
  return parse_scenario(doc, file.stem().string());
}

}  // namespace rc::sim
