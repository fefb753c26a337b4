// rc-file-bench: streams a large text file through `rc::file(path, {.lines = true})` on a real-time
// context and prints one JSON object: rows, bytes, seconds, rows/s, MB/s and the peak resident
// set (getrusage ru_maxrss), before and after the run.
//
//   rc-file-bench [--size-mb N] [--path FILE] [--chunk BYTES] [--keep]
//
// The input (lines of about 100 bytes: "id,customer,amount,padding") is written first, in 1 MiB
// pieces, unless FILE already exists with at least N MiB; it is removed afterwards unless --keep.
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <rc/rc.hpp>
#include <string>

namespace {

long peak_rss_kib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;  // KiB on Linux
}

void write_input(const std::string& path, std::uint64_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot create " + path);
  std::string piece;
  std::uint64_t id = 0, written = 0;
  while (written < bytes) {
    piece.clear();
    while (piece.size() < (1u << 20)) {
      piece +=
          fmt::format("{},customer-{:04d},{}.{:02d},{}\n", id, id % 1000, id % 997, id % 100, std::string(60, 'x'));
      ++id;
    }
    std::fwrite(piece.data(), 1, piece.size(), f);
    written += piece.size();
  }
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t size_mb = 1024;
  std::size_t chunk = 64 * 1024;
  std::string path = (std::filesystem::temp_directory_path() / "rc-file-bench.csv").string();
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--size-mb" && i + 1 < argc)
      size_mb = std::stoull(argv[++i]);
    else if (a == "--path" && i + 1 < argc)
      path = argv[++i];
    else if (a == "--chunk" && i + 1 < argc)
      chunk = std::stoull(argv[++i]);
    else if (a == "--keep")
      keep = true;
    else {
      std::fprintf(stderr, "usage: rc-file-bench [--size-mb N] [--path FILE] [--chunk BYTES] [--keep]\n");
      return 2;
    }
  }
  std::error_code ec;
  const std::uint64_t want = size_mb << 20;
  if (std::filesystem::file_size(path, ec) < want || ec) write_input(path, want);
  const std::uint64_t file_bytes = std::filesystem::file_size(path);
  const long rss_before = peak_rss_kib();

  std::atomic<std::uint64_t> rows{0}, bytes{0};
  rc::context ctx;
  ctx.add(rc::craft().id("lines").from(rc::file(path, {.lines = true, .chunk_size = chunk})).to([&](std::string& line) {
    rows.fetch_add(1, std::memory_order_relaxed);
    bytes.fetch_add(line.size() + 1, std::memory_order_relaxed);
  }));
  const auto t0 = std::chrono::steady_clock::now();
  ctx.start();
  ctx.drain();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ctx.stop();
  if (!keep) std::filesystem::remove(path, ec);

  std::printf(
      "{\"scenario\":\"file_lines\",\"file_bytes\":%llu,\"rows\":%llu,\"bytes\":%llu,\"seconds\":%.3f,"
      "\"rows_per_s\":%.0f,\"mb_per_s\":%.1f,\"chunk\":%zu,\"peak_rss_kib_before\":%ld,\"peak_rss_kib\":%ld}\n",
      static_cast<unsigned long long>(file_bytes), static_cast<unsigned long long>(rows.load()),
      static_cast<unsigned long long>(bytes.load()), secs, rows.load() / secs, bytes.load() / secs / 1e6, chunk,
      rss_before, peak_rss_kib());
  return bytes.load() == file_bytes ? 0 : 1;
}
