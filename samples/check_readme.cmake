# cmake -DREADME=<README.md> -DSAMPLES=<samples dir> -P check_readme.cmake
#
# README.md shows some samples verbatim: a line `<!-- sample: NAME.cpp -->` followed by a ```cpp
# block. The samples are built and run by ctest; this check makes sure the README still shows
# exactly what is built, so its examples cannot rot either.
file(READ "${README}" readme)
set(checked 0)
foreach(name readme_example.cpp readme_virtual_time.cpp)
  set(marker "<!-- sample: ${name} -->")
  string(FIND "${readme}" "${marker}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "README.md has no `${marker}` line before the code block of samples/${name}")
  endif()
  string(SUBSTRING "${readme}" ${at} -1 rest)
  string(FIND "${rest}" "```cpp\n" open)
  if(open EQUAL -1)
    message(FATAL_ERROR "README.md: no ```cpp block after `${marker}`")
  endif()
  math(EXPR open "${open} + 7")
  string(SUBSTRING "${rest}" ${open} -1 rest)
  string(FIND "${rest}" "\n```" close)
  string(SUBSTRING "${rest}" 0 ${close} shown)
  file(READ "${SAMPLES}/${name}" built)
  string(STRIP "${built}" built)
  string(STRIP "${shown}" shown)
  if(NOT shown STREQUAL built)
    message(FATAL_ERROR "README.md's block for samples/${name} differs from the file: copy the file into the README "
                        "(or the README block into the file) so the two match")
  endif()
  math(EXPR checked "${checked} + 1")
endforeach()
message(STATUS "README.md code blocks match ${checked} samples")
