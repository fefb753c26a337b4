// rc::directory: the polling source, its claim protocol and the glob matcher.
//
// Layout under the watched folder:
//   .processing/<owner>.lock   held (flock, exclusive) by a live owner for its whole run
//   .processing/<owner>/       the owner's claimed files
//   .done/  .error/            finished files (+ <name>.error.json for failures)
// A claim is a rename from the folder into the owner's folder (RENAME_NOREPLACE), so of two
// pollers exactly one gets a file. A lock file nobody holds belongs to a dead owner: whoever locks
// it first checks the path still names the locked file (a new owner of the same id may have just
// made it), moves the claimed files into its own folder, then removes the folder and the lock
// file, in that order, so a folder never outlives its lock file.
#include "rc/directory.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "process_name.hpp"
#include "rc/context.hpp"

namespace rc {

// ---- glob ---------------------------------------------------------------------------------------

namespace {

/// Matches one bracket set at p[i] ('[' already seen at p[i - 1]) against c. Sets `i` past ']'.
/// Returns nullopt for an unterminated set (then '[' is a literal).
std::optional<bool> match_set(std::string_view p, std::size_t& i, char c) {
  std::size_t j = i;
  bool negate = false;
  if (j < p.size() && (p[j] == '!' || p[j] == '^')) {
    negate = true;
    ++j;
  }
  bool hit = false;
  bool first = true;
  while (j < p.size() && (p[j] != ']' || first)) {
    first = false;
    char lo = p[j];
    if (lo == '\\' && j + 1 < p.size()) lo = p[++j];
    char hi = lo;
    if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
      hi = p[j + 2];
      if (hi == '\\' && j + 3 < p.size()) {
        hi = p[j + 3];
        ++j;
      }
      j += 2;
    }
    if (static_cast<unsigned char>(lo) <= static_cast<unsigned char>(c) &&
        static_cast<unsigned char>(c) <= static_cast<unsigned char>(hi))
      hit = true;
    ++j;
  }
  if (j >= p.size()) return std::nullopt;
  i = j + 1;
  return hit != negate;
}

}  // namespace

bool glob_match(std::string_view p, std::string_view n) noexcept {
  // A leading '.' only matches a literal '.' (as in a shell).
  if (!n.empty() && n[0] == '.' && (p.empty() || p[0] != '.')) return false;
  std::size_t pi = 0, ni = 0;
  std::size_t star_p = std::string_view::npos, star_n = 0;  // the last '*': retry from there
  while (ni < n.size()) {
    if (pi < p.size()) {
      const char c = p[pi];
      if (c == '*') {
        star_p = ++pi;
        star_n = ni;
        continue;
      }
      if (c == '?') {
        ++pi;
        ++ni;
        continue;
      }
      if (c == '[') {
        std::size_t after = pi + 1;
        if (auto m = match_set(p, after, n[ni])) {
          if (*m) {
            pi = after;
            ++ni;
            continue;
          }
        } else if (n[ni] == '[') {  // unterminated: a literal '['
          ++pi;
          ++ni;
          continue;
        }
      } else {
        char lit = c;
        std::size_t step = 1;
        if (c == '\\' && pi + 1 < p.size()) {
          lit = p[pi + 1];
          step = 2;
        }
        if (lit == n[ni]) {
          pi += step;
          ++ni;
          continue;
        }
      }
    }
    if (star_p == std::string_view::npos) return false;
    pi = star_p;
    ni = ++star_n;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

// ---- options ------------------------------------------------------------------------------------

void directory_options::validate() const {
  if (glob.empty()) invalid_option("directory", "glob", "a non-empty pattern", "\"\"");
  if (glob.find('/') != std::string::npos)
    invalid_option("directory", "glob", "a file name pattern (no '/')", fmt::format("\"{}\"", glob));
  if (interval <= duration::zero()) invalid_option("directory", "interval", "a duration > 0", ms_text(interval));
  if (chunk_size < 512 || chunk_size > (std::size_t{64} << 20))
    invalid_option("directory", "chunk_size", "in [512, 67108864] bytes", chunk_size);
  if (!owner.empty()) {
    const bool ok = owner.size() <= 200 && owner[0] != '.' && std::all_of(owner.begin(), owner.end(), [](char c) {
                      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                             c == '_' || c == '-';
                    });
    if (!ok)
      invalid_option("directory", "owner", "a name of [A-Za-z0-9._-] not starting with '.' (at most 200)",
                     fmt::format("\"{}\"", owner));
  }
}

// ---- file-system helpers ------------------------------------------------------------------------

namespace {

constexpr std::string_view op = "directory";

void ensure_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST) files::throw_errno(op, "create", path, errno);
}

/// rename without replacing: false when `to` exists or `from` is gone (someone else took it).
bool move_no_replace(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return true;
  int err = errno;
  if (err == EINVAL || err == ENOSYS) {  // a file system without RENAME_NOREPLACE: link + unlink
    if (::link(from.c_str(), to.c_str()) == 0) {
      ::unlink(from.c_str());
      return true;
    }
    err = errno;
  }
  if (err == ENOENT || err == EEXIST) return false;
  files::throw_errno(op, "claim", from, err);
}

struct dir_entry {
  std::string name;
  bool is_dir = false;
  bool is_file = false;
};

/// Entries of a folder (no "." / ".."); an absent folder lists as empty when `missing_ok`.
std::vector<dir_entry> list_dir(const std::string& path, bool missing_ok) {
  std::vector<dir_entry> out;
  DIR* d = ::opendir(path.c_str());
  if (!d) {
    if (missing_ok && errno == ENOENT) return out;
    files::throw_errno(op, "list", path, errno);
  }
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    dir_entry de{std::string(name)};
    unsigned char type = e->d_type;
    if (type == DT_UNKNOWN) {
      struct stat st {};
      if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
        type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
    }
    de.is_dir = type == DT_DIR;
    de.is_file = type == DT_REG;
    out.push_back(std::move(de));
  }
  ::closedir(d);
  return out;
}

bool same_file(int fd, const std::string& path) {
  struct stat a {
  }, b{};
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

}  // namespace

// ---- state --------------------------------------------------------------------------------------

struct directory_source::state {
  std::mutex mutex;
  int lock_fd = -1;
  std::string owner;
  std::string processing, lock_path, own_dir, done_dir, error_dir;
  subscription on_stopped;

  /// Lets go of the owner lock without tidying up: claims left in the owner's folder are for
  /// others to take (a forced stop abandoned their runs).
  void drop_lock() {
    std::lock_guard lock(mutex);
    if (lock_fd >= 0) ::close(lock_fd);
    lock_fd = -1;
  }
  /// A clean exit: removes the owner's folder and lock file when nothing is left claimed.
  void release() {
    std::lock_guard lock(mutex);
    if (lock_fd < 0) return;
    if (::rmdir(own_dir.c_str()) == 0 || errno == ENOENT) ::unlink(lock_path.c_str());
    ::close(lock_fd);
    lock_fd = -1;
  }
  bool holds() {
    std::lock_guard lock(mutex);
    return lock_fd >= 0;
  }
};

directory_source::directory_source(std::string path, directory_options o)
    : path_(std::move(path)), o_(std::move(o)), st_(std::make_shared<state>()) {
  o_.validate();
  if (path_.empty()) invalid_option("directory", "path", "a non-empty path", "\"\"");
  while (path_.size() > 1 && path_.back() == '/') path_.pop_back();
}
directory_source::directory_source(directory_source&&) noexcept = default;
directory_source::~directory_source() {
  if (st_) st_->release();
}

namespace {

/// Takes the owner id: creates and locks `<owner>.lock`, checking the path still names the
/// locked file (a reclaimer may have just removed a stale one). RC5003 if a live owner has it.
int lock_owner(const std::string& lock_path, const std::string& owner) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) files::throw_errno(op, "create the lock file", lock_path, errno);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      // Held: a live owner, or a reclaimer tidying a dead one (it lets go within a few renames).
      if (attempt >= 3)
        throw error(errc::misconfigured, fmt::format("directory(): owner \"{}\" is in use by a running poller", owner));
      ::usleep(1000);
      continue;
    }
    if (same_file(fd, lock_path)) return fd;
    ::close(fd);
  }
  throw error(errc::resource_not_accessible, fmt::format("directory(): cannot lock \"{}\"", lock_path));
}

}  // namespace

task<void> directory_source::run(source_context& sc) {
  state& st = *st_;
  struct stat dst {};
  if (::stat(path_.c_str(), &dst) != 0) files::throw_errno(op, "watch", path_, errno);
  if (!S_ISDIR(dst.st_mode)) files::throw_errno(op, "watch", path_, ENOTDIR);
  st.owner = o_.owner.empty() ? detail::unique_process_name() : o_.owner;
  st.processing = path_ + "/.processing";
  st.done_dir = path_ + "/.done";
  st.error_dir = path_ + "/.error";
  st.own_dir = st.processing + "/" + st.owner;
  st.lock_path = st.processing + "/" + st.owner + ".lock";
  ensure_dir(st.processing);
  if (o_.on_success == done_action::move) ensure_dir(st.done_dir);
  ensure_dir(st.error_dir);
  {
    const int fd = lock_owner(st.lock_path, st.owner);
    std::lock_guard lock(st.mutex);
    st.lock_fd = fd;
  }
  ensure_dir(st.own_dir);
  // A forced stop abandons the run in flight and never resumes this coroutine: let go of the
  // lock then, so another poller takes the claims over (as it would after a crash).
  std::weak_ptr<state> weak = st_;
  st.on_stopped = sc.route().ctx().on("context:stopped", [weak](const event&) {
    if (auto s = weak.lock()) s->drop_lock();
  });

  // Claims of this owner id left by an earlier run of it (a stable owner id after a crash).
  std::vector<std::string> pending;
  for (auto& e : list_dir(st.own_dir, false))
    if (e.is_file) pending.push_back(std::move(e.name));
  std::sort(pending.begin(), pending.end());

  std::exception_ptr failed;
  try {
    for (;;) {
      if (sc.stopping()) break;
      std::size_t done = 0;
      // 1. Claims of dead owners: taken over into our folder.
      for (const auto& e : list_dir(st.processing, false)) {
        if (!e.is_file || e.name.size() <= 5 || e.name.compare(e.name.size() - 5, 5, ".lock") != 0) continue;
        const std::string other = e.name.substr(0, e.name.size() - 5);
        if (other == st.owner || other.empty() || other[0] == '.') continue;
        const std::string lock_path = st.processing + "/" + e.name;
        const int fd = ::open(lock_path.c_str(), O_RDWR | O_CLOEXEC);
        if (fd < 0) continue;
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0 || !same_file(fd, lock_path)) {
          ::close(fd);  // alive, or already tidied by someone else
          continue;
        }
        const std::string their_dir = st.processing + "/" + other;
        std::vector<std::string> taken;
        bool left = false;
        for (const auto& f : list_dir(their_dir, true)) {
          if (!f.is_file) continue;
          if (move_no_replace(their_dir + "/" + f.name, st.own_dir + "/" + f.name))
            taken.push_back(f.name);
          else
            left = true;  // a file of the same name is ours right now: the next poll takes it
        }
        if (!left && (::rmdir(their_dir.c_str()) == 0 || errno == ENOENT)) ::unlink(lock_path.c_str());
        ::close(fd);
        std::sort(taken.begin(), taken.end());
        pending.insert(pending.end(), taken.begin(), taken.end());
      }
      for (const auto& name : pending) {
        co_await process(sc, name);
        ++done;
        if (sc.stopping()) break;
      }
      pending.clear();
      if (sc.stopping()) break;

      // 2. New files, in name order.
      std::vector<std::string> names;
      for (auto& e : list_dir(path_, false))
        if (e.is_file && e.name[0] != '.' && glob_match(o_.glob, e.name)) names.push_back(std::move(e.name));
      std::sort(names.begin(), names.end());
      for (const auto& name : names) {
        if (sc.stopping()) break;
        if (!move_no_replace(path_ + "/" + name, st.own_dir + "/" + name)) continue;  // another poller has it
        co_await process(sc, name);
        ++done;
      }
      if (done == 0 && o_.stop_when_empty) break;
      if (co_await sc.sleep_until(sc.now() + o_.interval) == wait_result::cancelled) break;
    }
  } catch (...) {
    failed = std::current_exception();
  }
  // Claims left behind keep the lock file (unlocked now), so the next poller takes them over.
  st.on_stopped.unsubscribe();
  st.release();
  if (failed) std::rethrow_exception(failed);
}

task<void> directory_source::process(source_context& sc, const std::string& name) {
  state& st = *st_;
  const std::string claimed = st.own_dir + "/" + name;
  struct stat fs {};
  if (::stat(claimed.c_str(), &fs) != 0) co_return;  // taken back after a forced stop: not ours
  std::exception_ptr read_failed;
  std::string body;
  if (o_.content) {
    try {
      body = co_await files::read_all(claimed, o_.chunk_size, sc.route().clock(), op);
    } catch (...) {
      read_failed = std::current_exception();
    }
  } else {
    body = claimed;
  }
  outcome result;
  if (!read_failed) {
    exchange ex = sc.make(std::move(body));
    ex.set_header(file_headers::path, path_ + "/" + name);
    ex.set_header(file_headers::name, name);
    ex.set_header(file_headers::size, static_cast<std::uint64_t>(fs.st_size));
    ex.set_header(file_headers::modified_ms,
                  static_cast<std::int64_t>(fs.st_mtim.tv_sec) * 1000 + fs.st_mtim.tv_nsec / 1000000);
    ex.set_header(directory_headers::claimed_path, claimed);
    run_result r = co_await sc.emit(std::move(ex));
    result = std::move(r.result);
  } else {
    result = outcome::failed(read_failed);
  }
  // Only the owner that still holds its lock may finish the file: after a forced stop it is
  // someone else's.
  if (!st.holds()) co_return;
  if (!result.is_fail()) {
    if (o_.on_success == done_action::remove) {
      if (::unlink(claimed.c_str()) != 0 && errno != ENOENT) files::throw_errno(op, "delete", claimed, errno);
    } else if (::rename(claimed.c_str(), (st.done_dir + "/" + name).c_str()) != 0 && errno != ENOENT) {
      files::throw_errno(op, "move to .done", claimed, errno);
    }
    co_return;
  }
  if (::rename(claimed.c_str(), (st.error_dir + "/" + name).c_str()) != 0 && errno != ENOENT)
    files::throw_errno(op, "move to .error", claimed, errno);
  nlohmann::json why = error_json(result.error);
  why["file"] = name;
  try {
    files::write_atomic(st.error_dir + "/" + name + ".error.json", why.dump(2), false, false, op);
  } catch (const error&) {
    // The file is in .error/ already; the note beside it is a courtesy.
  }
}

}  // namespace rc
