#include "rc/csv.hpp"

namespace rc::detail {
namespace {

void end_record(std::string& line, const csv_options& o) { line += o.crlf ? "\r\n" : "\n"; }

template <class Range>
void append_fields(std::string& line, const Range& fields, const csv_options& o) {
  bool first = true;
  for (const auto& f : fields) {
    if (!first) line.push_back(o.delimiter);
    first = false;
    csv_append_field(line, f, o.delimiter);
  }
  end_record(line, o);
}

}  // namespace

void csv_format(std::string& line, const exchange& ex, std::vector<std::string>& columns, const csv_options& o) {
  const any_body& b = ex.raw_body();
  if (b.holds<csv_row>()) {
    append_fields(line, b.get<csv_row>(), o);
    return;
  }
  if (b.holds<csv_record>()) {
    const auto& rec = b.get<csv_record>();
    if (columns.empty())
      for (const auto& [k, v] : rec) columns.push_back(k);
    std::vector<std::string_view> cells;
    cells.reserve(columns.size());
    for (const auto& c : columns) {
      const auto it = rec.find(c);
      cells.push_back(it == rec.end() ? std::string_view{} : std::string_view(it->second));
    }
    append_fields(line, cells, o);
    return;
  }
  const nlohmann::json j = body_as_json(ex, "csv");
  std::vector<std::string> cells;
  if (j.is_array()) {
    for (const auto& v : j) cells.push_back(csv_cell(v));
  } else if (j.is_object()) {
    if (columns.empty())
      for (const auto& [k, v] : j.items()) columns.push_back(k);
    for (const auto& c : columns) cells.push_back(j.contains(c) ? csv_cell(j.at(c)) : std::string());
  } else {
    cells.push_back(csv_cell(j));
  }
  append_fields(line, cells, o);
}

}  // namespace rc::detail
