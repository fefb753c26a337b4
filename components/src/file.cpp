// rc::file: the source, destination and enricher roles, and the POSIX file helpers that
// rc::directory shares (chunked reads, atomic writes, RC5014 errors naming the reason).
#include "rc/file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "rc/context.hpp"

namespace rc {

namespace {

/// Closes a descriptor when it goes out of scope.
struct fd_guard {
  int fd = -1;
  explicit fd_guard(int f) noexcept : fd(f) {}
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
  /// Closes now and reports close()'s error (a deferred write error shows up here on NFS).
  int close_now() noexcept {
    const int r = ::close(fd);
    fd = -1;
    return r == 0 ? 0 : errno;
  }
};

std::string parent_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string name_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void make_parents(const std::string& path, std::string_view op) {
  std::error_code ec;
  std::filesystem::create_directories(parent_of(path), ec);
  if (ec) files::throw_errno(op, "create the directory of", path, ec.value());
}

void write_fully(int fd, std::string_view data, std::string_view op, std::string_view what, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      files::throw_errno(op, what, path, errno);
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

int open_for_read(const std::string& path, std::string_view op) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) files::throw_errno(op, "open", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    files::throw_errno(op, "read", path, EISDIR);
  }
  return fd;
}

/// Reads up to `max` bytes (fewer only at the end of the file).
std::size_t read_some(int fd, char* out, std::size_t max, std::string_view op, const std::string& path) {
  std::size_t got = 0;
  while (got < max) {
    const ssize_t n = ::read(fd, out + got, max - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      files::throw_errno(op, "read", path, errno);
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  return got;
}

}  // namespace

// ---- options ------------------------------------------------------------------------------------

void file_options::validate() const {
  if (chunk_size < 512 || chunk_size > (std::size_t{64} << 20))
    invalid_option("file", "chunk_size", "in [512, 67108864] bytes", chunk_size);
  if (max_line < 1 || max_line > (std::size_t{1} << 30))
    invalid_option("file", "max_line", "in [1, 1073741824]", max_line);
  if (lines && append) invalid_option("file", "lines", "false when append is set (lines is a source option)", "true");
}

// ---- helpers ------------------------------------------------------------------------------------

namespace files {

void throw_errno(std::string_view op, std::string_view what, const std::string& path, int err) {
  const char* name = ::strerrorname_np(err);
  const std::string reason = name ? name : fmt::format("errno {}", err);
  throw error(errc::resource_not_accessible,
              fmt::format("{}(): cannot {} \"{}\": {} ({})", op, what, path, std::strerror(err), reason), false,
              nullptr, nlohmann::json{{"path", path}, {"errno", err}, {"reason", reason}});
}

task<std::string> read_all(const std::string& path, std::size_t chunk, scheduler& clock, std::string_view op) {
  fd_guard fd(open_for_read(path, op));
  std::string out;
  struct stat st {};
  if (::fstat(fd.fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<std::size_t>(st.st_size));
  for (;;) {
    const std::size_t at = out.size();
    out.resize(at + chunk);
    const std::size_t got = read_some(fd.fd, out.data() + at, chunk, op, path);
    out.resize(at + got);
    if (got < chunk) break;
    co_await clock.yield();  // a large file must not hold the thread: others run between chunks
  }
  co_return out;
}

void write_atomic(const std::string& path, std::string_view data, bool sync, bool create_dirs, std::string_view op) {
  if (path.empty()) throw error(errc::misconfigured, fmt::format("{}(): the path is empty", op));
  if (create_dirs) make_parents(path, op);
  static std::atomic<std::uint64_t> counter{0};
  const std::string dir = parent_of(path);
  // Hidden (leading dot), so a directory source polling this folder with a glob never sees it.
  const std::string tmp =
      fmt::format("{}/.{}.{}-{}.tmp", dir, name_of(path), ::getpid(), counter.fetch_add(1, std::memory_order_relaxed));
  fd_guard fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
  if (fd.fd < 0) throw_errno(op, "write", path, errno);
  try {
    // A file being replaced keeps its permissions.
    struct stat old {};
    if (::stat(path.c_str(), &old) == 0) (void)::fchmod(fd.fd, old.st_mode & 07777);
    write_fully(fd.fd, data, op, "write", path);
    if (sync && ::fsync(fd.fd) != 0) throw_errno(op, "write", path, errno);
    if (const int err = fd.close_now(); err != 0) throw_errno(op, "write", path, err);
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw_errno(op, "write", path, errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (sync) {
    // The rename is durable once the directory is.
    fd_guard d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (d.fd >= 0) (void)::fsync(d.fd);
  }
}

void append(const std::string& path, std::string_view data, std::string_view separator, bool sync, bool create_dirs,
            std::string_view op) {
  if (path.empty()) throw error(errc::misconfigured, fmt::format("{}(): the path is empty", op));
  if (create_dirs) make_parents(path, op);
  fd_guard fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666));
  if (fd.fd < 0) throw_errno(op, "append to", path, errno);
  // One write per record: concurrent appenders to a local file do not interleave inside it.
  std::string joined;
  std::string_view record = data;
  if (!separator.empty()) {
    joined.reserve(data.size() + separator.size());
    joined.append(data).append(separator);
    record = joined;
  }
  const off_t start = ::lseek(fd.fd, 0, SEEK_END);
  try {
    write_fully(fd.fd, record, op, "append to", path);
  } catch (...) {
    // A record cut short (disk full) is taken back, unless someone appended after it meanwhile.
    struct stat st {};
    if (start >= 0 && ::fstat(fd.fd, &st) == 0 && st.st_size > start &&
        static_cast<std::uint64_t>(st.st_size - start) <= record.size())
      (void)::ftruncate(fd.fd, start);
    throw;
  }
  if (sync && ::fdatasync(fd.fd) != 0) throw_errno(op, "append to", path, errno);
  if (const int err = fd.close_now(); err != 0) throw_errno(op, "append to", path, err);
}

std::string_view body_bytes(const exchange& ex, std::string_view op) {
  const any_body& b = ex.raw_body();
  if (b.holds<std::string>()) return b.get<std::string>();
  if (b.holds<std::string_view>()) return b.get<std::string_view>();
  if (b.holds<std::vector<std::byte>>()) {
    const auto& v = b.get<std::vector<std::byte>>();
    return {reinterpret_cast<const char*>(v.data()), v.size()};
  }
  if (b.holds<std::vector<char>>()) {
    const auto& v = b.get<std::vector<char>>();
    return {v.data(), v.size()};
  }
  if (b.holds<std::vector<unsigned char>>()) {
    const auto& v = b.get<std::vector<unsigned char>>();
    return {reinterpret_cast<const char*>(v.data()), v.size()};
  }
  throw error(errc::misconfigured,
              fmt::format("{}(): the body must be std::string or a byte vector to be written, got {}", op,
                          b.has_value() ? b.type().name() : "no body"));
}

}  // namespace files

// ---- file_endpoint ------------------------------------------------------------------------------

file_endpoint::file_endpoint(std::string path, file_options o) : path_(std::move(path)), o_(std::move(o)) {
  o_.validate();
  if (path_.empty()) invalid_option("file", "path", "a non-empty path", "\"\"");
}

file_endpoint::file_endpoint(path_fn path, file_options o) : path_fn_(std::move(path)), o_(std::move(o)) {
  o_.validate();
  if (!path_fn_) invalid_option("file", "path", "a path or a function of the exchange", "an empty function");
}

std::string file_endpoint::path_for(const exchange& ex) const {
  if (!path_fn_) return path_;
  std::string p;
  try {
    p = path_fn_(ex);
  } catch (const error&) {
    throw;
  } catch (...) {
    throw error(errc::step_failed, "file(): the path function threw: " + message_of(std::current_exception()), true,
                std::current_exception());
  }
  if (p.empty()) throw error(errc::misconfigured, "file(): the path function returned an empty path");
  return p;
}

task<void> file_endpoint::run(source_context& sc) {
  if (path_fn_)
    throw error(errc::misconfigured, "file(): a source needs a fixed path (a path function needs an exchange)");
  if (o_.lines) {
    co_await run_lines(sc, path_);
    co_return;
  }
  std::string content = co_await files::read_all(path_, o_.chunk_size, sc.route().clock());
  if (sc.stopping()) co_return;
  const auto size = content.size();
  exchange ex = sc.make(std::move(content));
  ex.set_header(file_headers::path, path_);
  ex.set_header(file_headers::size, size);
  (void)co_await sc.emit(std::move(ex));
}

task<void> file_endpoint::run_lines(source_context& sc, const std::string& path) {
  fd_guard fd(open_for_read(path, "file"));
  const nlohmann::json path_header = path;
  // buf holds [start, end): the unread rest of the last chunk. It grows past chunk_size only for
  // a line longer than a chunk, and never past max_line + chunk_size.
  std::vector<char> buf(o_.chunk_size);
  std::size_t start = 0, end = 0;
  std::uint64_t line_no = 0;
  bool eof = false;
  const auto emit_line = [&](std::string line) {
    exchange ex = sc.make(std::move(line));
    ex.set_header(file_headers::path, path_header);
    ex.set_header(file_headers::line, ++line_no);
    return sc.emit(std::move(ex));
  };
  while (!sc.stopping()) {
    const char* base = buf.data();
    const void* nl = std::memchr(base + start, '\n', end - start);
    if (nl != nullptr) {
      const auto at = static_cast<std::size_t>(static_cast<const char*>(nl) - base);
      std::size_t len = at - start;
      if (len > 0 && base[start + len - 1] == '\r') --len;
      if (len > o_.max_line)
        throw error(errc::source_parse_failed,
                    fmt::format("file(): line {} of \"{}\" is longer than max_line ({} bytes)", line_no + 1, path,
                                o_.max_line));
      std::string line(base + start, len);
      start = at + 1;
      (void)co_await emit_line(std::move(line));
      continue;
    }
    if (eof) {
      if (end > start) {  // a last line without a newline
        std::size_t len = end - start;
        if (buf[start + len - 1] == '\r') --len;
        std::string line(buf.data() + start, len);
        start = end;
        (void)co_await emit_line(std::move(line));
      }
      break;
    }
    // Need more bytes: keep the partial line at the front, then fill behind it.
    if (start > 0) {
      std::memmove(buf.data(), buf.data() + start, end - start);
      end -= start;
      start = 0;
    }
    if (end > o_.max_line)
      throw error(errc::source_parse_failed, fmt::format("file(): line {} of \"{}\" is longer than max_line ({} bytes)",
                                                         line_no + 1, path, o_.max_line));
    if (buf.size() - end < o_.chunk_size / 2) buf.resize(std::max(buf.size() * 2, end + o_.chunk_size));
    const std::size_t want = std::min(o_.chunk_size, buf.size() - end);
    const std::size_t got = read_some(fd.fd, buf.data() + end, want, "file", path);
    end += got;
    if (got < want) eof = true;
    co_await sc.route().clock().yield();  // one chunk at a time: others run in between
  }
}

void file_endpoint::send_now(exchange& ex, route_runtime&) {
  const std::string path = path_for(ex);
  const std::string_view bytes = files::body_bytes(ex);
  if (o_.append)
    files::append(path, bytes, o_.separator, o_.fsync, o_.create_dirs);
  else
    files::write_atomic(path, bytes, o_.fsync, o_.create_dirs);
}

task<exchange> file_endpoint::call(exchange& ex, route_runtime& rt) {
  const std::string path = path_for(ex);
  std::string content = co_await files::read_all(path, o_.chunk_size, rt.clock());
  exchange reply;
  reply.set_header(file_headers::path, path);
  reply.set_header(file_headers::size, content.size());
  reply.set_body(std::move(content));
  co_return reply;
}

}  // namespace rc
