// rc::file(path, {...}): one file, in three roles.
//
// - Source (`from(rc::file("in.txt"))`): the whole file as one std::string body; with
//   `.lines = true` one exchange per line (the line without its "\n" or "\r\n"), each awaited
//   before the next is read, so a file of any size streams through a buffer of `chunk_size` plus
//   the longest line. Headers: routecraft.file.path, routecraft.file.size (whole) or
//   routecraft.file.line (1-based, lines).
// - Destination (`to(rc::file("out.txt"))`): writes the body atomically (a temp file in the same
//   directory, fsync, rename over the target), so a reader sees the old file or the new one,
//   never half of one; `.append = true` appends the body plus `separator` in one write.
// - Enricher (`request<std::string>(rc::file(...))`): reads the whole file into the body.
//
// The path may be a function of the exchange (destination, enricher). Bodies are std::string
// (bytes, not necessarily text); the destination also takes std::vector<std::byte> and
// std::vector<char>. Every failure to open, read or write is RC5014 naming the path and the
// reason (ENOENT, EACCES, ENOSPC, ...); a line longer than `max_line` is RC5016.
// Reads go in chunks of `chunk_size` and give way to other work between chunks (no thread pool:
// a chunk of a local file reads in microseconds, and the engine stays deterministic in virtual
// time). Writes are synchronous on the route's thread.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "rc/endpoint.hpp"
#include "rc/options.hpp"

namespace rc {

/// Header keys set by rc::file and rc::directory.
namespace file_headers {
inline constexpr std::string_view path = "routecraft.file.path";
inline constexpr std::string_view name = "routecraft.file.name";
inline constexpr std::string_view line = "routecraft.file.line";
inline constexpr std::string_view size = "routecraft.file.size";
inline constexpr std::string_view modified_ms = "routecraft.file.modifiedMs";
}  // namespace file_headers

struct file_options {
  /// Source: one exchange per line instead of one for the whole file.
  bool lines = false;
  /// Destination: append the body (plus `separator`) instead of replacing the file.
  bool append = false;
  /// Destination, append mode: written after each body ("" for none).
  std::string separator = "\n";
  /// Destination: fsync the data (and the directory after a rename) before returning.
  bool fsync = true;
  /// Destination: create missing parent directories.
  bool create_dirs = false;
  /// Bytes read at a time; the line source's buffer. In [512, 64 MiB].
  std::size_t chunk_size = 64 * 1024;
  /// Lines mode: the longest line accepted (RC5016 beyond). In [1, 1 GiB].
  std::size_t max_line = 16 * 1024 * 1024;

  void validate() const;
};

using path_fn = std::function<std::string(const exchange&)>;

class file_endpoint final : public source<std::string>, public destination_base {
 public:
  file_endpoint(std::string path, file_options o);
  file_endpoint(path_fn path, file_options o);

  // source
  std::string_view adapter() const override { return "file"; }
  task<void> run(source_context& sc) override;

  // destination (synchronous: a write is a few system calls)
  void send_now(exchange& ex, route_runtime& rt) override;

  /// Enricher: an exchange whose body is the file's content (std::string).
  task<exchange> call(exchange& ex, route_runtime& rt);

  const file_options& options() const noexcept { return o_; }

 private:
  std::string path_for(const exchange& ex) const;
  task<void> run_lines(source_context& sc, const std::string& path);

  std::string path_;
  path_fn path_fn_;
  file_options o_;
};

inline file_endpoint file(std::string path, file_options o = {}) {
  return file_endpoint(std::move(path), std::move(o));
}
inline file_endpoint file(const char* path, file_options o = {}) {
  return file_endpoint(std::string(path), std::move(o));
}
/// The path computed per exchange (destination and enricher roles).
template <class F, class = std::enable_if_t<std::is_invocable_r_v<std::string, F&, const exchange&>>>
file_endpoint file(F path, file_options o = {}) {
  return file_endpoint(path_fn(std::move(path)), std::move(o));
}

namespace files {

/// RC5014 for a failed file operation: "file(): cannot <what> \"<path>\": <strerror> (<ENAME>)",
/// details {path, errno, reason}.
[[noreturn]] void throw_errno(std::string_view op, std::string_view what, const std::string& path, int err);

/// Reads a whole file in chunks of `chunk`, letting other work run between chunks.
task<std::string> read_all(const std::string& path, std::size_t chunk, scheduler& clock, std::string_view op = "file");

/// Writes `data` to `path` atomically: temp file in the same directory, fsync (if asked), rename.
void write_atomic(const std::string& path, std::string_view data, bool sync, bool create_dirs,
                  std::string_view op = "file");

/// Appends `data` and `separator` in one write.
void append(const std::string& path, std::string_view data, std::string_view separator, bool sync, bool create_dirs,
            std::string_view op = "file");

/// The bytes of a body a file destination can write: std::string, std::string_view,
/// std::vector<std::byte> / <char> / <unsigned char>. Anything else is RC5003.
std::string_view body_bytes(const exchange& ex, std::string_view op = "file");

}  // namespace files

}  // namespace rc
