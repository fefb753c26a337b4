#include "rc/detail/data_io.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "rc/error.hpp"

namespace rc::detail {
namespace {

[[noreturn]] void io_failed(std::string_view adapter, std::string_view what, const std::string& path, int err) {
  throw error(errc::resource_not_accessible,
              fmt::format("{}: cannot {} \"{}\": {}", adapter, what, path, std::strerror(err)));
}

std::atomic<std::uint64_t> temp_counter{0};

}  // namespace

// ---- byte_input --------------------------------------------------------------------------------

byte_input::byte_input(const std::string& path, std::string_view adapter, std::size_t chunk_bytes)
    : path_(path), adapter_(adapter), chunk_(std::max<std::size_t>(chunk_bytes, 1)) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) io_failed(adapter, "open", path, errno);
  buffer_ = std::make_unique<char[]>(chunk_);
  data_ = buffer_.get();
}

byte_input::byte_input(std::string_view text) : data_(text.data()), len_(text.size()) {}

byte_input::~byte_input() {
  if (fd_ >= 0) ::close(fd_);
}

bool byte_input::refill() {
  if (fd_ < 0) return false;
  for (;;) {
    const ssize_t n = ::read(fd_, buffer_.get(), chunk_);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) io_failed(adapter_, "read", path_, errno);
    pos_ = 0;
    len_ = static_cast<std::size_t>(n);
    return n > 0;
  }
}

// ---- line_reader -------------------------------------------------------------------------------

read_status line_reader::next(std::string& line) {
  line.clear();
  bool any = false;
  bool too_long = false;
  for (;;) {
    const std::string_view w = in_.window();
    if (w.empty()) {
      if (!any) return read_status::end;
      break;
    }
    any = true;
    const auto* nl = static_cast<const char*>(std::memchr(w.data(), '\n', w.size()));
    const std::size_t take = nl != nullptr ? static_cast<std::size_t>(nl - w.data()) : w.size();
    if (!too_long) {
      if (line.size() + take > max_) {
        too_long = true;
        line.clear();
      } else {
        line.append(w.data(), take);
      }
    }
    in_.consume(take);
    if (nl != nullptr) {
      in_.consume(1);
      break;
    }
  }
  ++line_;
  peak_ = std::max(peak_, in_.chunk_bytes() + line.capacity());
  if (too_long) return read_status::malformed;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return read_status::record;
}

// ---- csv_reader --------------------------------------------------------------------------------

void csv_reader::add(std::string& out, std::string_view bytes) {
  bytes_ += bytes.size();
  if (bytes_ > max_) over_ = true;
  if (!over_) out.append(bytes);
}

void csv_reader::skip_line() {
  for (int c = in_.get(); c != byte_input::eof; c = in_.get())
    if (c == '\n') {
      ++lines_done_;
      return;
    }
}

csv_reader::field_end csv_reader::read_field(std::string& out) {
  int c = in_.peek();
  if (c == '"') {
    in_.consume(1);
    const std::uint64_t opened = lines_done_ + 1;
    for (;;) {
      const std::string_view w = in_.window();
      if (w.empty()) {
        error_ = fmt::format("unterminated quoted field (opened on line {})", opened);
        return field_end::malformed;
      }
      std::size_t i = 0;
      while (i < w.size() && w[i] != '"') {
        if (w[i] == '\n') ++lines_done_;
        ++i;
      }
      add(out, w.substr(0, i));
      in_.consume(i);
      if (i == w.size()) continue;
      in_.consume(1);  // the quote
      if (in_.peek() == '"') {
        in_.consume(1);
        add(out, "\"");
        continue;
      }
      break;
    }
    c = in_.get();
    if (c == delim_) return field_end::delimiter;
    if (c == '\n' || c == byte_input::eof) {
      if (c == '\n') ++lines_done_;
      return field_end::record;
    }
    if (c == '\r' && (in_.peek() == '\n' || in_.peek() == byte_input::eof)) {
      if (in_.get() == '\n') ++lines_done_;
      return field_end::record;
    }
    error_ = fmt::format("unexpected character '{}' after a closing quote on line {}", static_cast<char>(c),
                         lines_done_ + 1);
    if (c != '\n') skip_line();
    return field_end::malformed;
  }
  for (;;) {
    const std::string_view w = in_.window();
    if (w.empty()) return field_end::record;
    std::size_t i = 0;
    while (i < w.size() && w[i] != delim_ && w[i] != '\n' && w[i] != '\r') ++i;
    add(out, w.substr(0, i));
    in_.consume(i);
    if (i == w.size()) continue;
    const char stop = w[i];
    in_.consume(1);
    if (stop == delim_) return field_end::delimiter;
    if (stop == '\n') {
      ++lines_done_;
      return field_end::record;
    }
    // CR: the end of the record when a LF (or the end) follows, else a character of the field.
    const int next = in_.peek();
    if (next == '\n') {
      in_.consume(1);
      ++lines_done_;
      return field_end::record;
    }
    if (next == byte_input::eof) return field_end::record;
    add(out, "\r");
  }
}

read_status csv_reader::next(std::vector<std::string>& fields) {
  fields.clear();
  error_.clear();
  for (;;) {  // blank lines
    const int c = in_.peek();
    if (c == byte_input::eof) return read_status::end;
    if (c == '\n') {
      in_.consume(1);
      ++lines_done_;
      continue;
    }
    if (c == '\r') {
      in_.consume(1);
      if (in_.peek() == '\n') in_.consume(1);
      ++lines_done_;
      continue;
    }
    break;
  }
  ++record_;
  start_line_ = lines_done_ + 1;
  bytes_ = 0;
  over_ = false;
  std::size_t held = 0;
  for (;;) {
    fields.emplace_back();
    const field_end e = read_field(fields.back());
    held += fields.back().capacity();
    if (e == field_end::malformed) {
      peak_ = std::max(peak_, in_.chunk_bytes() + held);
      return read_status::malformed;
    }
    if (e == field_end::record) break;
  }
  peak_ = std::max(peak_, in_.chunk_bytes() + held);
  if (over_) {
    error_ = fmt::format("record longer than max_record_bytes ({} bytes)", max_);
    return read_status::malformed;
  }
  return read_status::record;
}

// ---- writers -----------------------------------------------------------------------------------

append_file::append_file(append_file&& o) noexcept
    : path_(std::move(o.path_)),
      adapter_(std::move(o.adapter_)),
      fd_(std::exchange(o.fd_, -1)),
      empty_at_open_(o.empty_at_open_),
      mutex_(std::move(o.mutex_)) {}

append_file::~append_file() {
  if (fd_ >= 0) ::close(fd_);
}

void append_file::open() {
  const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) io_failed(adapter_, "open for appending", path_, errno);
  struct stat st {};
  empty_at_open_ = ::fstat(fd, &st) == 0 && st.st_size == 0;
  fd_ = fd;
}

void append_file::write_all(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) io_failed(adapter_, "write to", path_, errno);
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

void write_atomically(const std::string& path, std::string_view bytes, std::string_view adapter) {
  const std::string temp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), temp_counter.fetch_add(1));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_failed(adapter, "create", temp, errno);
  const auto fail = [&](std::string_view what, int err) {
    ::close(fd);
    ::unlink(temp.c_str());
    io_failed(adapter, what, path, err);
  };
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write", errno);
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  if (::fsync(fd) != 0) fail("flush", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    io_failed(adapter, "close", path, err);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    io_failed(adapter, "rename onto", path, err);
  }
}

std::string read_whole(const std::string& path, std::string_view adapter) {
  byte_input in(path, adapter, default_chunk_bytes);
  std::string out;
  for (std::string_view w = in.window(); !w.empty(); w = in.window()) {
    out.append(w);
    in.consume(w.size());
  }
  return out;
}

void csv_append_field(std::string& out, std::string_view field, char delimiter) {
  const bool quote = field.find_first_of(std::string{delimiter, '"', '\r', '\n'}) != std::string_view::npos ||
                     (!field.empty() && (field.front() == ' ' || field.back() == ' '));
  if (!quote) {
    out.append(field);
    return;
  }
  out.push_back('"');
  for (const char c : field) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
}

}  // namespace rc::detail
