// File input and output shared by the data adapters (rc/json.hpp, rc/jsonl.hpp, rc/csv.hpp):
// readers that hold one fixed-size chunk of the file plus the record being assembled (so memory
// stays bounded whatever the file's size), an RFC 4180 record reader, an appending writer and an
// atomic whole-file writer. Failures to open, read or write are RC5014 naming the path and the
// system's reason (not found, permission denied, no space left on device, ...).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace rc::detail {

inline constexpr std::size_t default_chunk_bytes = 64 * 1024;
inline constexpr std::size_t default_max_record_bytes = 16 * 1024 * 1024;

/// The raw record a parsing source emits; its parse step turns it into the typed body.
struct raw_record {
  std::string text;                 // json, jsonl: the text
  std::vector<std::string> fields;  // csv: the fields
  std::string error;                // the reader found the record malformed: why
  std::uint64_t line = 0;           // the line the record starts on (1-based)
  std::uint64_t record = 0;         // csv: the record's number (1-based, a header row counts)
};

/// How a raw record shows in events (a failed exchange's `exchange.body`): the text or fields,
/// the reader's error, and where it was.
inline void to_json(nlohmann::json& j, const raw_record& r) {
  j = nlohmann::json::object();
  if (!r.fields.empty())
    j["fields"] = r.fields;
  else
    j["text"] = r.text;
  if (!r.error.empty()) j["error"] = r.error;
  j["line"] = r.line;
  if (r.record != 0) j["record"] = r.record;
}

/// Bytes of a file (read in chunks) or of a string in memory.
class byte_input {
 public:
  /// Opens `path` (RC5014 when it cannot). `adapter` names the caller in messages.
  byte_input(const std::string& path, std::string_view adapter, std::size_t chunk_bytes);
  /// Reads `text`, which must outlive the input.
  explicit byte_input(std::string_view text);
  ~byte_input();
  byte_input(const byte_input&) = delete;
  byte_input& operator=(const byte_input&) = delete;

  static constexpr int eof = -1;
  int get() {
    if (pos_ == len_ && !refill()) return eof;
    return static_cast<unsigned char>(data_[pos_++]);
  }
  int peek() {
    if (pos_ == len_ && !refill()) return eof;
    return static_cast<unsigned char>(data_[pos_]);
  }
  /// The unread part of the current chunk (refilled when empty; empty at the end).
  std::string_view window() {
    if (pos_ == len_) (void)refill();
    return {data_ + pos_, len_ - pos_};
  }
  void consume(std::size_t n) noexcept { pos_ += n; }
  /// The chunk buffer's size (0 for a string in memory).
  std::size_t chunk_bytes() const noexcept { return chunk_; }

 private:
  bool refill();

  int fd_ = -1;
  std::string path_;
  std::string adapter_;
  std::unique_ptr<char[]> buffer_;
  std::size_t chunk_ = 0;
  const char* data_ = nullptr;
  std::size_t pos_ = 0;
  std::size_t len_ = 0;
};

enum class read_status : std::uint8_t { record, end, malformed };

/// Lines (LF or CRLF) one at a time. A line longer than `max_line_bytes` is skipped and reported
/// malformed, so memory stays within one chunk plus `max_line_bytes`.
class line_reader {
 public:
  line_reader(byte_input& in, std::size_t max_line_bytes) : in_(in), max_(max_line_bytes) {}
  read_status next(std::string& line);
  /// The number of the line last returned (1-based).
  std::uint64_t line() const noexcept { return line_; }
  /// The most bytes held at once: the chunk buffer plus the longest line assembled.
  std::size_t peak_buffered() const noexcept { return peak_; }

 private:
  byte_input& in_;
  std::size_t max_;
  std::uint64_t line_ = 0;
  std::size_t peak_ = 0;
};

/// RFC 4180 records: fields separated by `delimiter`, records by LF or CRLF; a field in double
/// quotes may hold delimiters, line breaks and doubled quotes (""). Blank lines are skipped. A
/// quote inside an unquoted field is kept as a character. Malformed: a quoted field never closed,
/// a character after a closing quote other than a delimiter or line break, or a record longer
/// than `max_record_bytes` (its bytes are skipped, so memory stays bounded).
class csv_reader {
 public:
  csv_reader(byte_input& in, char delimiter, std::size_t max_record_bytes)
      : in_(in), delim_(delimiter), max_(max_record_bytes) {}
  read_status next(std::vector<std::string>& fields);
  /// Why the last record was malformed.
  const std::string& error() const noexcept { return error_; }
  /// The last record's number (1-based) and the line it started on.
  std::uint64_t record() const noexcept { return record_; }
  std::uint64_t line() const noexcept { return start_line_; }
  std::size_t peak_buffered() const noexcept { return peak_; }

 private:
  enum class field_end : std::uint8_t { delimiter, record, malformed };
  field_end read_field(std::string& out);
  void add(std::string& out, std::string_view bytes);
  void skip_line();

  byte_input& in_;
  char delim_;
  std::size_t max_;
  std::string error_;
  std::uint64_t lines_done_ = 0;  // line breaks consumed
  std::uint64_t record_ = 0;
  std::uint64_t start_line_ = 0;
  std::size_t bytes_ = 0;  // the current record's bytes
  bool over_ = false;      // the current record passed max_
  std::size_t peak_ = 0;
};

/// Appends records to a file, opened on the first write (created if missing), one write() per
/// record with O_APPEND so a reader never sees half a record. Safe from several threads.
class append_file {
 public:
  append_file(std::string path, std::string adapter) : path_(std::move(path)), adapter_(std::move(adapter)) {}
  append_file(append_file&& o) noexcept;
  append_file& operator=(append_file&&) = delete;
  ~append_file();
  /// Writes `bytes`; `first(bool empty)` runs once, under the lock, before the first write, told
  /// whether the file was empty when opened, and returns what to write before (a CSV header).
  template <class First>
  void write(std::string_view bytes, First&& first) {
    std::lock_guard lock(*mutex_);
    if (fd_ < 0) {
      open();
      std::string head = first(empty_at_open_);
      if (!head.empty()) write_all(head);
    }
    write_all(bytes);
  }
  void write(std::string_view bytes) {
    write(bytes, [](bool) { return std::string(); });
  }

 private:
  void open();
  void write_all(std::string_view bytes);

  std::string path_;
  std::string adapter_;
  int fd_ = -1;
  bool empty_at_open_ = false;
  std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();
};

/// Replaces `path` with `bytes` atomically: a temporary file in the same folder, flushed, then
/// renamed over the target, so a reader sees the old file or the new one, never half of one.
void write_atomically(const std::string& path, std::string_view bytes, std::string_view adapter);
/// The whole file as a string (RC5014 when it cannot be read).
std::string read_whole(const std::string& path, std::string_view adapter);
/// Appends `field` to `out`, in double quotes (quotes doubled) when it holds the delimiter, a
/// quote, CR or LF, or starts or ends with a space.
void csv_append_field(std::string& out, std::string_view field, char delimiter);

/// A flag a source and its parse step share; copying or moving a source starts a fresh one.
struct stop_flag {
  std::atomic<bool> value{false};
  stop_flag() = default;
  stop_flag(const stop_flag&) noexcept {}
  stop_flag& operator=(const stop_flag&) noexcept { return *this; }
  bool raised() const noexcept { return value.load(std::memory_order_acquire); }
};

}  // namespace rc::detail
