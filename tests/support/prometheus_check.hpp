// A strict reader of the Prometheus text format (0.0.4) for tests: every line must be a HELP, a
// TYPE or a sample that parses; a family's TYPE comes once, before its samples; counters end in
// _total; a histogram's buckets are cumulative and end with le="+Inf" equal to its _count.
// Samples are kept by their full text ("name{a=\"x\"}") so a test asserts exact values.
#pragma once

#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace rc::test {

struct prometheus_text {
  std::map<std::string, double> samples;     // "name{labels}" -> value, labels as written
  std::map<std::string, std::string> types;  // family -> type
  std::vector<std::string> errors;           // empty when the text is valid

  bool valid() const { return errors.empty(); }
  /// The value of a sample written exactly as `key`; nothing when absent.
  std::optional<double> get(const std::string& key) const {
    const auto it = samples.find(key);
    if (it == samples.end()) return std::nullopt;
    return it->second;
  }
};

inline prometheus_text parse_prometheus(std::string_view text) {
  prometheus_text p;
  static const std::regex help_re(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*$)");
  static const std::regex type_re(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
  static const std::regex sample_re(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\\\|\\"|\\n|[^"\\\n])*"(,[a-zA-Z_][a-zA-Z0-9_]*="(\\\\|\\"|\\n|[^"\\\n])*")*)?\})? ([^ ]+)$)");
  std::set<std::string> seen_samples_of;  // families that have had samples
  std::string last_family;
  if (!text.empty() && text.back() != '\n') p.errors.push_back("the text does not end with a line feed");
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string line(text.substr(start, end - start));
    start = end + 1;
    std::smatch m;
    if (line.rfind("# HELP ", 0) == 0) {
      if (!std::regex_match(line, m, help_re)) p.errors.push_back("bad HELP: " + line);
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      if (!std::regex_match(line, m, type_re)) {
        p.errors.push_back("bad TYPE: " + line);
        continue;
      }
      const std::string family = m[1];
      if (p.types.count(family)) p.errors.push_back("TYPE twice: " + family);
      if (seen_samples_of.count(family)) p.errors.push_back("TYPE after samples: " + family);
      if (m[2] == "counter" && (family.size() < 6 || family.substr(family.size() - 6) != "_total"))
        p.errors.push_back("counter not ending in _total: " + family);
      p.types[family] = m[2];
      last_family = family;
      continue;
    }
    if (line.empty() || line[0] == '#') {
      p.errors.push_back("unexpected line: " + line);
      continue;
    }
    if (!std::regex_match(line, m, sample_re)) {
      p.errors.push_back("bad sample: " + line);
      continue;
    }
    const std::string name = m[1];
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (name.size() > s.size() && name.substr(name.size() - s.size()) == s &&
          p.types.count(name.substr(0, name.size() - s.size())) &&
          p.types[name.substr(0, name.size() - s.size())] == "histogram")
        family = name.substr(0, name.size() - s.size());
    }
    if (!p.types.count(family)) p.errors.push_back("sample before its TYPE: " + line);
    if (family != last_family) p.errors.push_back("sample outside its family's block: " + line);
    seen_samples_of.insert(family);
    const std::string value = m[m.size() - 1];
    double v = 0;
    if (value == "+Inf") {
      v = HUGE_VAL;
    } else if (value == "-Inf") {
      v = -HUGE_VAL;
    } else if (value == "NaN") {
      v = 0;
    } else {
      char* e = nullptr;
      v = std::strtod(value.c_str(), &e);
      if (e == nullptr || *e != '\0') p.errors.push_back("bad value: " + line);
    }
    const std::string key = line.substr(0, line.size() - value.size() - 1);
    if (p.samples.count(key)) p.errors.push_back("sample twice: " + key);
    p.samples[key] = v;
  }
  return p;
}

}  // namespace rc::test
