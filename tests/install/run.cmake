# cmake -DBUILD=<build dir> -DSOURCE=<tests/install> -DWORK=<scratch dir> -P run.cmake
#
# Installs the build into a scratch prefix, then configures, builds and runs a small project that
# uses find_package(routecraft) and links routecraft::testing, as a user's project would.
file(REMOVE_RECURSE "${WORK}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD}" --prefix "${WORK}/prefix" RESULT_VARIABLE rc
                OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE}" -B "${WORK}/build" -G Ninja -DCMAKE_BUILD_TYPE=Release
                        "-DCMAKE_PREFIX_PATH=${WORK}/prefix" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring a project with find_package(routecraft) failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build "${WORK}/build" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building against routecraft::testing failed (${rc})")
endif()
execute_process(COMMAND "${WORK}/build/uses_testing" RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "ok")
  message(FATAL_ERROR "the installed test kit did not work: exit ${rc}, output: ${out}")
endif()
message(STATUS "find_package(routecraft) + routecraft::testing: ok")
