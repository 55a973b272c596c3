# Included from tests/CMakeLists.txt. Builds the libFuzzer targets
# (tests/fuzz/CMakeLists.txt, a project of its own) with clang++ and adds a
# CTest test of the same name for each, which runs it for a bounded time over
# a copy of its seed corpus (run_fuzzer.cmake): fuzz_openai_request
# (TROUPE_FUZZ_SECONDS, seeds in corpus/, run in fuzz-run/),
# fuzz_chat_template, fuzz_tokenizer and fuzz_grammar
# (TROUPE_FUZZ_CHAT_TEMPLATE_SECONDS, TROUPE_FUZZ_TOKENIZER_SECONDS,
# TROUPE_FUZZ_GRAMMAR_SECONDS; seeds in corpus_chat_template/,
# corpus_tokenizer/ and corpus_grammar/, run in fuzz-run-<name>/).
# Without a clang++ whose -fsanitize=fuzzer links (Debian: clang and
# libclang-rt-14-dev, see scripts/setup.sh) it warns and adds nothing.
option(TROUPE_BUILD_FUZZ "Build and run the libFuzzer targets (needs clang++)" ON)
set(TROUPE_FUZZ_SECONDS 45 CACHE STRING "How long the fuzz_openai_request test fuzzes")
set(TROUPE_FUZZ_CHAT_TEMPLATE_SECONDS 30 CACHE STRING
  "How long the fuzz_chat_template test fuzzes")
set(TROUPE_FUZZ_TOKENIZER_SECONDS 30 CACHE STRING "How long the fuzz_tokenizer test fuzzes")
set(TROUPE_FUZZ_GRAMMAR_SECONDS 30 CACHE STRING "How long the fuzz_grammar test fuzzes")
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
  message(WARNING "troupe: no clang++, so no fuzz tests (scripts/setup.sh installs clang)")
  return()
elseif(NOT TROUPE_FUZZ_CXX_WORKS STREQUAL TROUPE_FUZZ_CXX)
  message(WARNING "troupe: ${TROUPE_FUZZ_CXX} cannot link -fsanitize=fuzzer,address,undefined, so "
    "no fuzz tests (scripts/setup.sh installs libclang-rt-14-dev):\n${check_out}")
  return()
endif()
message(STATUS "troupe: fuzz targets built with ${TROUPE_FUZZ_CXX}")

include(ExternalProject)
set(fuzz_dir ${CMAKE_CURRENT_BINARY_DIR}/fuzz)
set(fuzzers fuzz_openai_request fuzz_chat_template fuzz_tokenizer fuzz_grammar)
list(TRANSFORM fuzzers PREPEND ${fuzz_dir}/ OUTPUT_VARIABLE fuzz_programs)
# One inner build makes all three. CMAKE_BUILD_PARALLEL_LEVEL in the
# environment limits its jobs.
ExternalProject_Add(troupe_fuzzers
  SOURCE_DIR ${CMAKE_CURRENT_LIST_DIR}
  BINARY_DIR ${fuzz_dir}
  PREFIX ${CMAKE_CURRENT_BINARY_DIR}/fuzz-ep
  CMAKE_ARGS -DCMAKE_CXX_COMPILER=${TROUPE_FUZZ_CXX}
  INSTALL_COMMAND ""
  BUILD_ALWAYS ON  # the main build cannot see the sources change; the inner build decides
  BUILD_BYPRODUCTS ${fuzz_programs})

# troupe_fuzz_test(NAME SEEDS WORK_DIR SECONDS): the CTest test NAME.
function(troupe_fuzz_test name seeds work_dir seconds)
  add_test(NAME ${name}
    COMMAND ${CMAKE_COMMAND}
      -DFUZZER=${fuzz_dir}/${name}
      -DSEEDS=${CMAKE_CURRENT_LIST_DIR}/${seeds}
      -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/${work_dir}
      -DSECONDS=${seconds}
      -P ${CMAKE_CURRENT_LIST_DIR}/run_fuzzer.cmake)
  math(EXPR timeout "${seconds} + 120")
  set_tests_properties(${name} PROPERTIES TIMEOUT ${timeout} LABELS fuzz)
endfunction()
troupe_fuzz_test(fuzz_openai_request corpus fuzz-run ${TROUPE_FUZZ_SECONDS})
troupe_fuzz_test(fuzz_chat_template corpus_chat_template fuzz-run-chat_template
  ${TROUPE_FUZZ_CHAT_TEMPLATE_SECONDS})
troupe_fuzz_test(fuzz_tokenizer corpus_tokenizer fuzz-run-tokenizer ${TROUPE_FUZZ_TOKENIZER_SECONDS})
troupe_fuzz_test(fuzz_grammar corpus_grammar fuzz-run-grammar ${TROUPE_FUZZ_GRAMMAR_SECONDS})
