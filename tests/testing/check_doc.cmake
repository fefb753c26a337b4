# cmake -DDOC=<docs/testing.md> -DDIR=<tests/testing> -P check_doc.cmake
#
# docs/testing.md shows the test kit's example verbatim: a line `<!-- test: NAME.cpp -->` followed
# by a ```cpp block. The test is built and run by ctest; this check makes sure the page still shows
# exactly what runs, so the example cannot drift from a passing test.
file(READ "${DOC}" doc)
set(name testing_example_test.cpp)
set(marker "<!-- test: ${name} -->")
string(FIND "${doc}" "${marker}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "docs/testing.md has no `${marker}` line before the code block of tests/testing/${name}")
endif()
string(SUBSTRING "${doc}" ${at} -1 rest)
string(FIND "${rest}" "```cpp\n" open)
if(open EQUAL -1)
  message(FATAL_ERROR "docs/testing.md: no ```cpp block after `${marker}`")
endif()
math(EXPR open "${open} + 7")
string(SUBSTRING "${rest}" ${open} -1 rest)
string(FIND "${rest}" "\n```" close)
string(SUBSTRING "${rest}" 0 ${close} shown)
file(READ "${DIR}/${name}" built)
string(STRIP "${built}" built)
string(STRIP "${shown}" shown)
if(NOT shown STREQUAL built)
  message(FATAL_ERROR "docs/testing.md's block for tests/testing/${name} differs from the file: copy the file into "
                      "the page (or the page's block into the file) so the two match")
endif()
message(STATUS "docs/testing.md shows tests/testing/${name} verbatim")
