// rc::directory(path, {...}): a polling source of the files in one folder whose names match a
// glob. One exchange per file, one file at a time (each run awaited: natural backpressure).
//
// Every `interval` of engine time the folder is listed (regular files, names not starting with
// '.', matching `glob`, in name order). Each file is CLAIMED before it is read: renamed into
// `.processing/<owner>/`, which only one poller can do. After the run the file moves to `.done/`
// (or is deleted, `on_success = remove`) when the run completed or was dropped, and to `.error/`
// (with `<name>.error.json` beside it: code and message) when it failed.
//
// Owners and crashes: each source holds an exclusive flock on `.processing/<owner>.lock` while it
// runs. The kernel drops the lock when the process dies; a forced stop drops it too. Every poll
// looks for lock files nobody holds: their owner is gone, and its claimed files are claimed again
// (renamed into the poller's own folder) and processed. So a file is never lost, and never
// processed by two live pollers; a file whose run was cut short by a crash or a forced stop is
// processed again (at least once), and a file that reached `.done/` is never processed again.
// See docs/files.md for the protocol.
//
// Body: the file's content (std::string), read in chunks that let other work run between them;
// `content = false` gives the claimed file's path instead (for files too large for memory).
// Headers: routecraft.file.path (where the file was found), .name, .size, .modifiedMs (epoch
// ms), and routecraft.directory.claimedPath (where it is while the run lasts).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "rc/endpoint.hpp"
#include "rc/file.hpp"
#include "rc/options.hpp"

namespace rc {

/// What happens to a file whose run completed (or was dropped).
enum class done_action : std::uint8_t { move, remove };

namespace directory_headers {
inline constexpr std::string_view claimed_path = "routecraft.directory.claimedPath";
}

struct directory_options {
  /// Names to take: '*' (any run of characters), '?' (one), '[abc]' / '[a-z]' / '[!x]' (a set),
  /// '\' escapes. A leading '.' is never matched (hidden and temp files).
  std::string glob = "*";
  /// Time between polls (engine time).
  duration interval = std::chrono::seconds(1);
  /// After success: move into `.done/` or delete.
  done_action on_success = done_action::move;
  /// Body = the file's content (true) or the claimed file's path (false).
  bool content = true;
  /// Finish (a finite source) after a poll that found nothing to do.
  bool stop_when_empty = false;
  /// Claim owner id (a file name part: [A-Za-z0-9._-], no leading '.'). Empty: host-pid-random.
  /// A stable id lets a restarted program take back its own claims at once.
  std::string owner;
  /// Read chunk size. In [512, 64 MiB].
  std::size_t chunk_size = 64 * 1024;

  void validate() const;
};

/// Whether `name` matches the glob `pattern` (the syntax of directory_options::glob).
bool glob_match(std::string_view pattern, std::string_view name) noexcept;

class directory_source final : public source<std::string> {
 public:
  directory_source(std::string path, directory_options o);
  ~directory_source() override;
  directory_source(directory_source&&) noexcept;
  directory_source& operator=(directory_source&&) = delete;

  std::string_view adapter() const override { return "directory"; }
  bool finite() const noexcept override { return o_.stop_when_empty; }
  task<void> run(source_context& sc) override;

  struct state;

 private:
  task<void> process(source_context& sc, const std::string& name);

  std::string path_;
  directory_options o_;
  std::shared_ptr<state> st_;
};

inline directory_source directory(std::string path, directory_options o = {}) {
  return directory_source(std::move(path), std::move(o));
}

}  // namespace rc
