# cmake -DDOC=<page.md> -DDIR=<folder> -DKIND=<sample|test> -DFILES=<a.cpp,b.cpp> -P check_doc_blocks.cmake
#
# A page shows some source files verbatim: a line `<!-- KIND: NAME.cpp -->` followed by a ```cpp
# block. The files are built and run by ctest; this check makes sure the page still shows exactly
# what runs, so its examples cannot drift from passing code. FILES is comma-separated (a `;` would
# split the -D argument).
get_filename_component(page "${DOC}" NAME)
get_filename_component(folder "${DIR}" NAME)
file(READ "${DOC}" doc)
string(REPLACE "," ";" files "${FILES}")
set(checked 0)
foreach(name IN LISTS files)
  set(marker "<!-- ${KIND}: ${name} -->")
  string(FIND "${doc}" "${marker}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${page} has no `${marker}` line before the code block of ${folder}/${name}")
  endif()
  string(SUBSTRING "${doc}" ${at} -1 rest)
  string(FIND "${rest}" "```cpp\n" open)
  if(open EQUAL -1)
    message(FATAL_ERROR "${page}: no ```cpp block after `${marker}`")
  endif()
  math(EXPR open "${open} + 7")
  string(SUBSTRING "${rest}" ${open} -1 rest)
  string(FIND "${rest}" "\n```" close)
  string(SUBSTRING "${rest}" 0 ${close} shown)
  file(READ "${DIR}/${name}" built)
  string(STRIP "${built}" built)
  string(STRIP "${shown}" shown)
  if(NOT shown STREQUAL built)
    message(FATAL_ERROR "${page}'s block for ${folder}/${name} differs from the file: copy the file into the page "
                        "(or the page's block into the file) so the two match")
  endif()
  math(EXPR checked "${checked} + 1")
endforeach()
message(STATUS "${page} shows ${checked} file(s) of ${folder}/ verbatim")
