// jsonl(): JSON Lines, one JSON value per line, as typed bodies (nlohmann::json, or any type with
// from_json / to_json found by ADL).
//
//   rc::jsonl<T>({.path = "in.jsonl"})  source: one exchange per non-blank line, streamed: the
//                                       file is read in chunks of `chunk_bytes` and each
//                                       exchange's run is awaited before the next line is read,
//                                       so memory is one chunk plus one line whatever the file's
//                                       size. Headers routecraft.jsonl.path / .line (1-based).
//                                       Missing or unreadable: RC5014.
//   rc::jsonl({.path = "out.jsonl"})    destination: appends the body as one line (one write per
//                                       line, so a reader never sees half of one).
//   rc::jsonl<T>()                      transformer: std::string (many lines) -> std::vector<T>,
//                                       std::vector<T> -> std::string.
//
// A line that does not parse (or does not convert to T, or is longer than max_line_bytes)
// follows the route's on_parse_error (rc/parse.hpp, docs/data.md).
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "rc/detail/data_io.hpp"
#include "rc/endpoint.hpp"
#include "rc/json.hpp"
#include "rc/options.hpp"
#include "rc/parse.hpp"

namespace rc {

struct jsonl_options {
  std::string path;
  std::size_t chunk_bytes = detail::default_chunk_bytes;          // source: read size
  std::size_t max_line_bytes = detail::default_max_record_bytes;  // source: longer lines fail to parse

  void validate(std::string_view op) const {
    if (path.empty()) invalid_option(op, "path", "a file path (omit the options for a transformer)", "\"\"");
    if (chunk_bytes == 0) invalid_option(op, "chunk_bytes", "> 0", chunk_bytes);
    if (max_line_bytes == 0) invalid_option(op, "max_line_bytes", "> 0", max_line_bytes);
  }
};

namespace detail {

inline bool blank(std::string_view s) noexcept { return s.find_first_not_of(" \t\r") == std::string_view::npos; }

template <class T>
class jsonl_parse_step final : public parse_step {
 public:
  jsonl_parse_step(parse_error mode, stop_flag* stop, std::string path)
      : parse_step(mode, &stop->value), path_(std::move(path)) {}
  std::string_view adapter() const override { return "jsonl"; }

 protected:
  void parse(exchange& ex) override {
    raw_record& raw = ex.body<raw_record>();
    if (!raw.error.empty()) throw error(errc::source_parse_failed, fmt::format("{}: {}", where(ex), raw.error));
    T value = json_to<T>(nlohmann::json::parse(raw.text));
    ex.set_body(std::move(value));
  }
  std::string where(const exchange& ex) const override {
    return fmt::format("jsonl \"{}\" line {}", path_, ex.body<raw_record>().line);
  }

 private:
  std::string path_;
};

}  // namespace detail

/// Source (from) and destination (to) on one file; see the top of this header.
template <class T = nlohmann::json>
class jsonl_file final : public source<T>, public destination_base {
 public:
  explicit jsonl_file(jsonl_options o) : o_(std::move(o)), out_(o_.path, "jsonl") { o_.validate("jsonl"); }

  std::string_view adapter() const override { return "jsonl"; }

  task<void> run(source_context& sc) override {
    detail::byte_input in(o_.path, "jsonl", o_.chunk_bytes);
    detail::line_reader lines(in, o_.max_line_bytes);
    const nlohmann::json path = o_.path;
    std::string line;
    while (!sc.stopping() && !stop_.raised()) {
      const detail::read_status st = lines.next(line);
      if (st == detail::read_status::end) break;
      if (st == detail::read_status::record && detail::blank(line)) continue;
      detail::raw_record raw;
      raw.line = lines.line();
      if (st == detail::read_status::malformed)
        raw.error = fmt::format("line longer than max_line_bytes ({} bytes)", o_.max_line_bytes);
      else
        raw.text = std::move(line);
      exchange ex = sc.make(std::move(raw));
      ex.set_header("routecraft.jsonl.path", path);
      ex.set_header("routecraft.jsonl.line", lines.line());
      (void)co_await sc.emit(std::move(ex));
    }
    peak_buffered_ = lines.peak_buffered();
  }
  std::unique_ptr<step> make_parse_step(parse_error mode) override {
    return std::make_unique<detail::jsonl_parse_step<T>>(mode, &stop_, o_.path);
  }

  void send_now(exchange& ex, route_runtime&) override {
    std::string line = detail::body_as_json(ex, "jsonl").dump();
    line.push_back('\n');
    out_.write(line);
  }

  /// After a run: the most bytes the reader held at once (chunk plus the longest line).
  std::size_t peak_buffered() const noexcept { return peak_buffered_; }

 private:
  jsonl_options o_;
  detail::append_file out_;
  detail::stop_flag stop_;
  std::size_t peak_buffered_ = 0;
};

/// std::string <-> std::vector<T>, for .transform(): one value per non-blank line.
template <class T = nlohmann::json>
struct jsonl_transformer {
  std::vector<T> operator()(const std::string& text) const {
    std::vector<T> out;
    detail::byte_input in{std::string_view(text)};
    detail::line_reader lines(in, text.size() + 1);
    std::string line;
    while (lines.next(line) != detail::read_status::end) {
      if (detail::blank(line)) continue;
      try {
        out.push_back(detail::json_to<T>(nlohmann::json::parse(line)));
      } catch (const nlohmann::json::exception& e) {
        throw error(errc::source_parse_failed, fmt::format("jsonl(): line {}: {}", lines.line(), e.what()));
      }
    }
    return out;
  }
  std::string operator()(const std::vector<T>& values) const {
    std::string out;
    for (const auto& v : values) {
      out += nlohmann::json(v).dump();
      out.push_back('\n');
    }
    return out;
  }
};

template <class T = nlohmann::json>
jsonl_file<T> jsonl(jsonl_options o) {
  return jsonl_file<T>(std::move(o));
}
template <class T = nlohmann::json>
jsonl_transformer<T> jsonl() {
  return {};
}

}  // namespace rc
