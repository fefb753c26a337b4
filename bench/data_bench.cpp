// data-bench: rows per second and peak resident memory of the csv and jsonl sources reading a
// large file through a route (source -> parse -> a counting step), one JSON object per run:
//   data-bench --format csv|jsonl [--mb 1024] [--dir /tmp] [--keep]
// The input is generated in --dir before the run (not timed) and removed afterwards unless
// --keep. Peak RSS is getrusage's ru_maxrss for the whole process, generation included (which
// writes through a small buffer). cpu_seconds is the process's user + system time during the run
// (rows_per_cpu_s: the figure that holds on a machine shared with other work).
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <rc/rc.hpp>
#include <string>
#include <string_view>

namespace {

struct row {
  std::string id;
  std::string name;
  double amount = 0;
  std::string note;
};
void from_json(const nlohmann::json& j, row& r) {
  j.at("id").get_to(r.id);
  j.at("name").get_to(r.name);
  j.at("amount").get_to(r.amount);
  j.at("note").get_to(r.note);
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

long peak_rss_kb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// Writes about `bytes` of records; returns the number written.
std::uint64_t generate(const std::string& path, bool csv, std::uint64_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw std::runtime_error("cannot create " + path);
  std::uint64_t written = 0;
  std::uint64_t n = 0;
  if (csv) written += static_cast<std::uint64_t>(std::fprintf(f, "id,name,amount,note\n"));
  char buf[256];
  while (written < bytes) {
    const int len =
        csv ? std::snprintf(buf, sizeof buf,
                            "%llu,customer %llu,%llu.%02llu,\"a note, with a comma and \"\"quotes\"\"\"\n",
                            static_cast<unsigned long long>(n), static_cast<unsigned long long>(n % 9973),
                            static_cast<unsigned long long>(n % 1000), static_cast<unsigned long long>(n % 100))
            : std::snprintf(buf, sizeof buf,
                            "{\"id\":\"%llu\",\"name\":\"customer %llu\",\"amount\":%llu.%02llu,"
                            "\"note\":\"a note, with a comma and \\\"quotes\\\"\"}\n",
                            static_cast<unsigned long long>(n), static_cast<unsigned long long>(n % 9973),
                            static_cast<unsigned long long>(n % 1000), static_cast<unsigned long long>(n % 100));
    std::fwrite(buf, 1, static_cast<std::size_t>(len), f);
    written += static_cast<std::uint64_t>(len);
    ++n;
  }
  std::fclose(f);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::string format = "csv";
  std::uint64_t mb = 1024;
  std::string dir = "/tmp";
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--format" && i + 1 < argc)
      format = argv[++i];
    else if (a == "--mb" && i + 1 < argc)
      mb = std::stoull(argv[++i]);
    else if (a == "--dir" && i + 1 < argc)
      dir = argv[++i];
    else if (a == "--keep")
      keep = true;
    else {
      std::fprintf(stderr, "usage: data-bench --format csv|jsonl [--mb N] [--dir D] [--keep]\n");
      return 2;
    }
  }
  const bool csv = format == "csv";
  if (!csv && format != "jsonl") {
    std::fprintf(stderr, "--format must be csv or jsonl\n");
    return 2;
  }
  const std::string path = dir + "/rc-data-bench-" + std::to_string(mb) + "mb." + format;
  const std::uint64_t rows = generate(path, csv, mb * 1024 * 1024);
  const auto file_bytes = std::filesystem::file_size(path);
  const long rss_before = peak_rss_kb();

  std::atomic<std::uint64_t> seen{0};
  std::atomic<std::uint64_t> bad{0};
  const auto started = std::chrono::steady_clock::now();
  const double cpu_started = cpu_seconds();
  {
    rc::context ctx;
    auto sub = ctx.on("route:parse:failed", [&](const rc::event&) { bad.fetch_add(1, std::memory_order_relaxed); });
    if (csv)
      ctx.add(rc::craft().id("bench").from(rc::csv<rc::csv_record>({.path = path})).to([&](rc::csv_record& r) {
        if (!r.empty()) seen.fetch_add(1, std::memory_order_relaxed);
      }));
    else
      ctx.add(rc::craft().id("bench").from(rc::jsonl<row>({.path = path})).to([&](row& r) {
        if (!r.id.empty()) seen.fetch_add(1, std::memory_order_relaxed);
      }));
    ctx.start();
    ctx.drain();
    ctx.stop();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double cpu = cpu_seconds() - cpu_started;
  if (!keep) std::filesystem::remove(path);
  std::printf(
      "{\"format\":\"%s\",\"file_mb\":%.1f,\"rows\":%llu,\"completed\":%llu,\"parse_failed\":%llu,\"seconds\":%.2f,"
      "\"rows_per_s\":%.0f,\"cpu_seconds\":%.2f,\"rows_per_cpu_s\":%.0f,\"mb_per_s\":%.1f,\"peak_rss_mb_before_run\":%."
      "1f,\"peak_rss_mb\":%.1f}\n",
      format.c_str(), static_cast<double>(file_bytes) / (1024.0 * 1024.0), static_cast<unsigned long long>(rows),
      static_cast<unsigned long long>(seen.load()), static_cast<unsigned long long>(bad.load()), secs,
      static_cast<double>(seen.load()) / secs, cpu, static_cast<double>(seen.load()) / cpu,
      static_cast<double>(file_bytes) / (1024.0 * 1024.0) / secs, static_cast<double>(rss_before) / 1024.0,
      static_cast<double>(peak_rss_kb()) / 1024.0);
  return seen.load() == rows && bad.load() == 0 ? 0 : 1;
}
