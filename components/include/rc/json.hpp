// json(): JSON documents as typed bodies (nlohmann::json, or any type with from_json / to_json
// found by ADL, nlohmann's convention).
//
//   rc::json<T>({.path = "in.json"})   source: the whole file is one exchange, body T. A file
//                                      holding an array is still one exchange (use rc::jsonl for
//                                      a record per line). Missing or unreadable: RC5014.
//   rc::json({.path = "out.json"})     destination: each exchange replaces the file with its body
//                                      as JSON, atomically (temporary file, then rename).
//   rc::json<T>()                      transformer for .transform(): std::string -> T (parse) and
//                                      T -> std::string (serialize), picked by the body type.
//
// The source parses in the route's parse step (rc/parse.hpp): a document that does not parse, or
// does not convert to T, follows the route's on_parse_error (RC5016 by default). The transformer
// is a plain step: its failures are RC5016 errors of that step. See docs/data.md.
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <utility>

#include "rc/detail/data_io.hpp"
#include "rc/endpoint.hpp"
#include "rc/options.hpp"
#include "rc/parse.hpp"

namespace rc {

struct json_options {
  std::string path;
  /// Destination: -1 writes compact JSON, n >= 0 pretty-prints with n spaces.
  int indent = -1;

  void validate(std::string_view op) const {
    if (path.empty()) invalid_option(op, "path", "a file path (omit the options for a transformer)", "\"\"");
    if (indent < -1) invalid_option(op, "indent", "-1 (compact) or >= 0", indent);
  }
};

namespace detail {

/// nlohmann::json as it is, any other type through its from_json.
template <class T>
T json_to(nlohmann::json&& j) {
  if constexpr (std::is_same_v<T, nlohmann::json>)
    return std::move(j);
  else
    return j.template get<T>();
}

/// The body as JSON for a writing adapter: RC5002 when its type has no to_json.
inline nlohmann::json body_as_json(const exchange& ex, std::string_view adapter) {
  if (!ex.raw_body().converts_to_json())
    throw error(errc::validation,
                fmt::format("{}: the body ({}) does not convert to JSON; give its type a to_json", adapter,
                            ex.raw_body().has_value() ? ex.raw_body().type().name() : "empty"));
  return ex.raw_body().to_json();
}

template <class T>
class json_parse_step final : public parse_step {
 public:
  json_parse_step(parse_error mode, stop_flag* stop, std::string path)
      : parse_step(mode, &stop->value), path_(std::move(path)) {}
  std::string_view adapter() const override { return "json"; }

 protected:
  void parse(exchange& ex) override {
    raw_record& raw = ex.body<raw_record>();
    T value = json_to<T>(nlohmann::json::parse(raw.text));
    ex.set_body(std::move(value));
  }
  std::string where(const exchange&) const override { return fmt::format("json \"{}\"", path_); }

 private:
  std::string path_;
};

}  // namespace detail

/// Source (from) and destination (to) on one file; see the top of this header.
template <class T = nlohmann::json>
class json_file final : public source<T>, public destination_base {
 public:
  explicit json_file(json_options o) : o_(std::move(o)) { o_.validate("json"); }

  std::string_view adapter() const override { return "json"; }

  task<void> run(source_context& sc) override {
    detail::raw_record raw;
    raw.text = detail::read_whole(o_.path, "json");
    raw.line = 1;
    exchange ex = sc.make(std::move(raw));
    ex.set_header("routecraft.json.path", o_.path);
    (void)co_await sc.emit(std::move(ex));
  }
  std::unique_ptr<step> make_parse_step(parse_error mode) override {
    return std::make_unique<detail::json_parse_step<T>>(mode, &stop_, o_.path);
  }

  void send_now(exchange& ex, route_runtime&) override {
    const nlohmann::json j = detail::body_as_json(ex, "json");
    std::string text = j.dump(o_.indent);
    text.push_back('\n');
    detail::write_atomically(o_.path, text, "json");
  }

 private:
  json_options o_;
  detail::stop_flag stop_;
};

/// std::string <-> T, for .transform(): parses a string body, serializes a T body.
template <class T = nlohmann::json>
struct json_transformer {
  int indent = -1;

  T operator()(const std::string& text) const {
    try {
      return detail::json_to<T>(nlohmann::json::parse(text));
    } catch (const nlohmann::json::exception& e) {
      throw error(errc::source_parse_failed, fmt::format("json(): {}", e.what()));
    }
  }
  std::string operator()(const T& value) const { return nlohmann::json(value).dump(indent); }
};

template <class T = nlohmann::json>
json_file<T> json(json_options o) {
  return json_file<T>(std::move(o));
}
template <class T = nlohmann::json>
json_transformer<T> json() {
  return {};
}

}  // namespace rc
