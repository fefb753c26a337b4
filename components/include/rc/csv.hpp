// csv(): RFC 4180 CSV as typed bodies.
//
//   rc::csv<T>({.path = "in.csv"})   source: one exchange per record, streamed (read in chunks of
//                                    `chunk_bytes`, each run awaited before the next record is
//                                    read: memory is one chunk plus one record). Headers
//                                    routecraft.csv.path / .record / .line (the record's number,
//                                    the header row counting as record 1, and its first line).
//                                    Missing or unreadable: RC5014.
//   rc::csv({.path = "out.csv"})     destination: appends the body as one record; writes the
//                                    header row first when the file is new (empty) and names
//                                    are known. Fields are quoted when they need it.
//   rc::csv<T>()                     transformer: std::string -> std::vector<T> and back.
//
// Body types T:
//   rc::csv_row    (std::vector<std::string>)            the fields, in order;
//   rc::csv_record (std::map<std::string, std::string>)  field name -> value (needs names);
//   any type with from_json / to_json: read from a JSON object {name: "value", ...} (or, without
//   names, an array of strings); written from its to_json (an object by column, an array as is).
// Names come from the header row (`header`, default true) or `columns`.
//
// Malformed records (a quote never closed, a character after a closing quote, a record over
// max_record_bytes) and, when `strict` (default), a record whose field count differs from the
// header's (or the first record's) follow the route's on_parse_error (rc/parse.hpp).
#pragma once

#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "rc/detail/data_io.hpp"
#include "rc/endpoint.hpp"
#include "rc/json.hpp"
#include "rc/options.hpp"
#include "rc/parse.hpp"

namespace rc {

using csv_row = std::vector<std::string>;
using csv_record = std::map<std::string, std::string>;

struct csv_options {
  std::string path;
  /// Source: the first record names the fields (and is not emitted). Destination: write a
  /// header row when the file is new and names are known (columns, or the first record's keys).
  bool header = true;
  /// Field names when the file has no header row (source), or the column order (destination;
  /// default: the first record's keys, in their map / JSON object order).
  std::vector<std::string> columns;
  char delimiter = ',';
  /// Source: a record with a different field count is a parse failure.
  bool strict = true;
  /// Destination: end records with CRLF (RFC 4180) or LF.
  bool crlf = true;
  std::size_t chunk_bytes = detail::default_chunk_bytes;
  std::size_t max_record_bytes = detail::default_max_record_bytes;

  void validate(std::string_view op, bool need_path) const {
    if (need_path && path.empty())
      invalid_option(op, "path", "a file path (omit the options for a transformer)", "\"\"");
    if (delimiter == '"' || delimiter == '\r' || delimiter == '\n')
      invalid_option(op, "delimiter", "a character other than a quote, CR or LF", fmt::format("'{}'", delimiter));
    if (chunk_bytes == 0) invalid_option(op, "chunk_bytes", "> 0", chunk_bytes);
    if (max_record_bytes == 0) invalid_option(op, "max_record_bytes", "> 0", max_record_bytes);
  }
};

namespace detail {

/// The record's fields as a T (see the top of this header). Throws on a failed conversion.
template <class T>
T csv_convert(std::vector<std::string>&& fields, const std::vector<std::string>& names) {
  if constexpr (std::is_same_v<T, csv_row>) {
    return std::move(fields);
  } else if constexpr (std::is_same_v<T, csv_record>) {
    csv_record out;
    for (std::size_t i = 0; i < fields.size() && i < names.size(); ++i) out[names[i]] = std::move(fields[i]);
    return out;
  } else {
    nlohmann::json j;
    if (names.empty()) {
      j = nlohmann::json::array();
      for (auto& f : fields) j.push_back(std::move(f));
    } else {
      j = nlohmann::json::object();
      for (std::size_t i = 0; i < fields.size() && i < names.size(); ++i) j[names[i]] = std::move(fields[i]);
    }
    return json_to<T>(std::move(j));
  }
}

/// One JSON value as a CSV field: strings as they are, null empty, anything else as JSON.
inline std::string csv_cell(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return {};
  return v.dump();
}

/// Field count check for strict mode: `expected` is fixed by the names or the first record.
inline void csv_check_count(std::size_t got, std::size_t& expected, const std::vector<std::string>& names) {
  if (expected == 0) expected = names.empty() ? got : names.size();
  if (got != expected) throw std::runtime_error(fmt::format("{} fields, expected {}", got, expected));
}

template <class T>
class csv_parse_step final : public parse_step {
 public:
  csv_parse_step(parse_error mode, stop_flag* stop, std::string path, const std::vector<std::string>* names,
                 bool strict)
      : parse_step(mode, &stop->value), path_(std::move(path)), names_(names), strict_(strict) {}
  std::string_view adapter() const override { return "csv"; }

 protected:
  void parse(exchange& ex) override {
    raw_record& raw = ex.body<raw_record>();
    if (!raw.error.empty()) throw error(errc::source_parse_failed, fmt::format("{}: {}", where(ex), raw.error));
    if (strict_) csv_check_count(raw.fields.size(), expected_, *names_);
    T value = csv_convert<T>(std::move(raw.fields), *names_);
    ex.set_body(std::move(value));
  }
  std::string where(const exchange& ex) const override {
    const raw_record& raw = ex.body<raw_record>();
    return fmt::format("csv \"{}\" record {} (line {})", path_, raw.record, raw.line);
  }

 private:
  std::string path_;
  const std::vector<std::string>* names_;  // the source's, filled before its first record
  bool strict_;
  std::size_t expected_ = 0;
};

/// Appends one record of `ex`'s body to `line` (with the line ending). `columns` is fixed from
/// the first named record when empty.
void csv_format(std::string& line, const exchange& ex, std::vector<std::string>& columns, const csv_options& o);

}  // namespace detail

/// Source (from) and destination (to) on one file; see the top of this header.
template <class T = csv_row>
class csv_file final : public source<T>, public destination_base {
 public:
  explicit csv_file(csv_options o) : o_(std::move(o)), out_(o_.path, "csv") {
    o_.validate("csv", true);
    if (std::is_same_v<T, csv_record> && !o_.header && o_.columns.empty())
      invalid_option("csv", "header", "true (or columns given) for csv_record bodies", "false");
    names_ = o_.columns;
    columns_ = o_.columns;
  }

  std::string_view adapter() const override { return "csv"; }

  task<void> run(source_context& sc) override {
    detail::byte_input in(o_.path, "csv", o_.chunk_bytes);
    detail::csv_reader reader(in, o_.delimiter, o_.max_record_bytes);
    const nlohmann::json path = o_.path;
    std::vector<std::string> fields;
    if (o_.header) {
      const detail::read_status st = reader.next(fields);
      if (st == detail::read_status::malformed)
        throw error(errc::source_parse_failed,
                    fmt::format("csv \"{}\" header row (line {}): {}", o_.path, reader.line(), reader.error()));
      if (st == detail::read_status::end) co_return;
      if (o_.columns.empty()) names_ = std::move(fields);
    }
    while (!sc.stopping() && !stop_.raised()) {
      const detail::read_status st = reader.next(fields);
      if (st == detail::read_status::end) break;
      detail::raw_record raw;
      raw.line = reader.line();
      raw.record = reader.record();
      if (st == detail::read_status::malformed)
        raw.error = reader.error();
      else
        raw.fields = std::move(fields);
      exchange ex = sc.make(std::move(raw));
      ex.set_header("routecraft.csv.path", path);
      ex.set_header("routecraft.csv.record", reader.record());
      ex.set_header("routecraft.csv.line", reader.line());
      (void)co_await sc.emit(std::move(ex));
    }
    peak_buffered_ = reader.peak_buffered();
  }
  std::unique_ptr<step> make_parse_step(parse_error mode) override {
    return std::make_unique<detail::csv_parse_step<T>>(mode, &stop_, o_.path, &names_, o_.strict);
  }

  void send_now(exchange& ex, route_runtime&) override {
    std::string line;
    {
      std::lock_guard lock(*columns_mutex_);
      detail::csv_format(line, ex, columns_, o_);
    }
    out_.write(line, [this](bool empty) {
      std::string head;
      if (!o_.header || !empty) return head;
      std::lock_guard lock(*columns_mutex_);
      if (columns_.empty()) return head;
      for (std::size_t i = 0; i < columns_.size(); ++i) {
        if (i > 0) head.push_back(o_.delimiter);
        detail::csv_append_field(head, columns_[i], o_.delimiter);
      }
      head += o_.crlf ? "\r\n" : "\n";
      return head;
    });
  }

  /// After a run: the most bytes the reader held at once (chunk plus the largest record).
  std::size_t peak_buffered() const noexcept { return peak_buffered_; }

 private:
  csv_options o_;
  detail::append_file out_;
  detail::stop_flag stop_;
  std::vector<std::string> names_;    // source: header row or columns
  std::vector<std::string> columns_;  // destination: column order
  std::unique_ptr<std::mutex> columns_mutex_ = std::make_unique<std::mutex>();
  std::size_t peak_buffered_ = 0;
};

/// std::string <-> std::vector<T>, for .transform(), with the same options (no path).
template <class T = csv_row>
struct csv_transformer {
  csv_options options;

  std::vector<T> operator()(const std::string& text) const {
    options.validate("csv", false);
    detail::byte_input in{std::string_view(text)};
    detail::csv_reader reader(in, options.delimiter, options.max_record_bytes);
    std::vector<std::string> names = options.columns;
    std::vector<std::string> fields;
    std::vector<T> out;
    std::size_t expected = 0;
    bool first = true;
    for (;;) {
      const detail::read_status st = reader.next(fields);
      if (st == detail::read_status::end) break;
      try {
        if (st == detail::read_status::malformed) throw std::runtime_error(reader.error());
        if (first && options.header) {
          first = false;
          if (options.columns.empty()) names = std::move(fields);
          continue;
        }
        first = false;
        if (options.strict) detail::csv_check_count(fields.size(), expected, names);
        out.push_back(detail::csv_convert<T>(std::move(fields), names));
      } catch (const std::exception& e) {
        throw error(errc::source_parse_failed,
                    fmt::format("csv(): record {} (line {}): {}", reader.record(), reader.line(), e.what()));
      }
    }
    return out;
  }

  std::string operator()(const std::vector<T>& rows) const {
    std::string out;
    std::vector<std::string> columns = options.columns;
    std::string body;
    for (const auto& r : rows) {
      exchange ex;
      ex.set_body(r);
      detail::csv_format(body, ex, columns, options);
    }
    if (options.header && !columns.empty()) {
      for (std::size_t i = 0; i < columns.size(); ++i) {
        if (i > 0) out.push_back(options.delimiter);
        detail::csv_append_field(out, columns[i], options.delimiter);
      }
      out += options.crlf ? "\r\n" : "\n";
    }
    return out + body;
  }
};

template <class T = csv_row>
csv_file<T> csv(csv_options o) {
  return csv_file<T>(std::move(o));
}
template <class T = csv_row>
csv_transformer<T> csv() {
  return {};
}

}  // namespace rc
