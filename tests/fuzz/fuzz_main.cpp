// libFuzzer entry point of one target: RC_FUZZ_TARGET names the harness function (fuzz_harness.hpp).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "fuzz_harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    RC_FUZZ_TARGET(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz finding: %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "fuzz finding: an exception that is not a std::exception\n");
    std::abort();
  }
  return 0;
}
