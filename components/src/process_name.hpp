// A name for this process among others on shared storage (a directory's claim owner, a Redis
// stream consumer): the host name (letters, digits and '-'; anything else becomes '_'), the pid and
// 32 random bits, so two processes, or one restarted with the same pid, never share a name.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <cctype>
#include <random>
#include <string>

namespace rc::detail {

inline std::string unique_process_name() {
  char host[64] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string h;
  for (const char* c = host; *c; ++c)
    h.push_back((std::isalnum(static_cast<unsigned char>(*c)) || *c == '-') ? *c : '_');
  if (h.empty()) h = "host";
  std::random_device rd;
  return fmt::format("{}-{}-{:08x}", h, ::getpid(), rd());
}

}  // namespace rc::detail
