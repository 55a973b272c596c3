# Included from tests/CMakeLists.txt. Builds the libFuzzer target
# (tests/fuzz/CMakeLists.txt, a project of its own) with clang++ and adds the
# CTest test fuzz_openai_request, which runs it for TROUPE_FUZZ_SECONDS over a
# copy of the seed corpus. Without a clang++ whose -fsanitize=fuzzer links
# (Debian: clang and libclang-rt-14-dev, see scripts/setup.sh) it warns and
# adds nothing.
option(TROUPE_BUILD_FUZZ "Build and run the libFuzzer target (needs clang++)" ON)
set(TROUPE_FUZZ_SECONDS 45 CACHE STRING "How long the fuzz_openai_request test fuzzes")
if(NOT TROUPE_BUILD_FUZZ)
  return()
endif()

find_program(TROUPE_FUZZ_CXX NAMES clang++ clang++-14)
if(TROUPE_FUZZ_CXX AND NOT TROUPE_FUZZ_CXX_WORKS STREQUAL TROUPE_FUZZ_CXX)
  # Does a fuzz target link with this clang? Only success is cached, so
  # installing the runtime later is noticed on the next configure.
  set(check_dir ${CMAKE_CURRENT_BINARY_DIR}/fuzz-check)
  file(WRITE ${check_dir}/check.cpp
    "#include <cstddef>\n#include <cstdint>\n"
    "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
  execute_process(
    COMMAND ${TROUPE_FUZZ_CXX} -fsanitize=fuzzer,address,undefined check.cpp -o check
    WORKING_DIRECTORY ${check_dir}
    RESULT_VARIABLE check_rc OUTPUT_VARIABLE check_out ERROR_VARIABLE check_out)
  if(check_rc EQUAL 0)
    set(TROUPE_FUZZ_CXX_WORKS ${TROUPE_FUZZ_CXX} CACHE INTERNAL "clang++ that links fuzz targets")
  endif()
endif()

if(NOT TROUPE_FUZZ_CXX)
  message(WARNING "troupe: no clang++, so no fuzz_openai_request test (scripts/setup.sh installs clang)")
  return()
elseif(NOT TROUPE_FUZZ_CXX_WORKS STREQUAL TROUPE_FUZZ_CXX)
  message(WARNING "troupe: ${TROUPE_FUZZ_CXX} cannot link -fsanitize=fuzzer,address,undefined, so "
    "no fuzz_openai_request test (scripts/setup.sh installs libclang-rt-14-dev):\n${check_out}")
  return()
endif()
message(STATUS "troupe: fuzz_openai_request built with ${TROUPE_FUZZ_CXX}")

include(ExternalProject)
set(fuzz_dir ${CMAKE_CURRENT_BINARY_DIR}/fuzz)
# CMAKE_BUILD_PARALLEL_LEVEL in the environment limits the inner build's jobs.
ExternalProject_Add(fuzz_openai_request
  SOURCE_DIR ${CMAKE_CURRENT_LIST_DIR}
  BINARY_DIR ${fuzz_dir}
  PREFIX ${CMAKE_CURRENT_BINARY_DIR}/fuzz-ep
  CMAKE_ARGS -DCMAKE_CXX_COMPILER=${TROUPE_FUZZ_CXX}
  INSTALL_COMMAND ""
  BUILD_ALWAYS ON  # the main build cannot see the sources change; the inner build decides
  BUILD_BYPRODUCTS ${fuzz_dir}/fuzz_openai_request)

add_test(NAME fuzz_openai_request
  COMMAND ${CMAKE_COMMAND}
    -DFUZZER=${fuzz_dir}/fuzz_openai_request
    -DSEEDS=${CMAKE_CURRENT_LIST_DIR}/corpus
    -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/fuzz-run
    -DSECONDS=${TROUPE_FUZZ_SECONDS}
    -P ${CMAKE_CURRENT_LIST_DIR}/run_fuzzer.cmake)
math(EXPR fuzz_timeout "${TROUPE_FUZZ_SECONDS} + 120")
set_tests_properties(fuzz_openai_request PROPERTIES TIMEOUT ${fuzz_timeout} LABELS fuzz)
