// Scratch folders for the file and directory tests: a fresh folder under $TMPDIR (or /tmp),
// removed with everything in it when the test ends; small helpers to read and write files; and a
// tiny tmpfs mount for the disk-full and read-only cases (root only: `mounted()` says whether it
// worked, and a test that needs it says so and passes without it).
#pragma once

#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace rc::test {

class temp_dir {
 public:
  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/rc-test-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = buf.data();
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const noexcept { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  std::string file(const std::string& name) const { return *this / name; }

  /// Writes `text` to `name` (binary, as given) and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name), std::ios::binary) << text;
    return file(name);
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::string path_;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void spit(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

/// Names in a folder (hidden ones included), sorted; empty when it does not exist.
inline std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// A tmpfs of `size` bytes mounted at `where` (made if missing), unmounted when destroyed.
class tiny_tmpfs {
 public:
  tiny_tmpfs(const std::string& where, const std::string& size, bool read_only = false) : where_(where) {
    std::filesystem::create_directories(where_);
    const std::string data = "size=" + size;
    mounted_ = ::mount("tmpfs", where_.c_str(), "tmpfs", read_only ? MS_RDONLY : 0, data.c_str()) == 0;
  }
  tiny_tmpfs(const tiny_tmpfs&) = delete;
  tiny_tmpfs& operator=(const tiny_tmpfs&) = delete;
  ~tiny_tmpfs() {
    if (mounted_) ::umount2(where_.c_str(), MNT_DETACH);
  }
  bool mounted() const noexcept { return mounted_; }
  /// Remounts read-only (after the test has put files there).
  bool make_read_only() {
    return mounted_ && ::mount("tmpfs", where_.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, nullptr) == 0;
  }

 private:
  std::string where_;
  bool mounted_ = false;
};

}  // namespace rc::test
