// The fuzz targets' bodies, one function per target. Two callers: the libFuzzer binaries
// (fuzz_main.cpp, built with -DRC_FUZZ=ON and clang) and the normal suite's replay test
// (fuzz_replay_test.cpp), which feeds them the committed corpus and every input a fuzzer ever
// crashed on, so a fixed crash stays fixed in every build, sanitizer builds included.
//
// A function returns for an input the library handled as documented (accepted, or refused with
// the documented error) and throws `finding` when a property does not hold. Any other exception
// escaping is a finding too; the sanitizers report the rest (memory errors, undefined behaviour).
#pragma once

#include <stdexcept>
#include <string_view>

namespace rc::fuzz {

struct finding : std::logic_error {
  using std::logic_error::logic_error;
};

/// Bytes from a client, through the HTTP server's request reader, fed whole, byte by byte and in
/// pseudo-random pieces: the same requests and refusals every way. The first four bytes choose the
/// limits (so that small inputs reach them).
void http_request(std::string_view input);

/// An rc-sim scenario (JSON): parsed, checked by the engine's option validation, and run when
/// small. Bad input is an rc::sim::scenario_error or an rc::error, nothing else.
void scenario(std::string_view input);

/// The HTTP components' text options and client-identity headers: URL, listen host/path/method,
/// trusted proxies with X-Forwarded-For / Forwarded, Retry-After, query parameters. The first
/// byte chooses the entry point; lines are fields. Bad options are RC5003, nothing else.
void http_options(std::string_view input);

/// The HTTP server's route index: patterns, a blank line, paths (one per line). Every route whose
/// pattern matches a path must be a candidate for it, named once, in ascending order.
void http_routes(std::string_view input);

}  // namespace rc::fuzz
