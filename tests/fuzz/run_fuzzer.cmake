# A fuzz test (cmake -P; tests/fuzz/fuzz.cmake adds fuzz_openai_request,
# fuzz_chat_template and fuzz_tokenizer): runs FUZZER for SECONDS over a
# fresh copy of the seed corpus SEEDS in WORK_DIR, so the repository is never
# written. Any crash, sanitizer report, timeout or out-of-memory fails the
# test; the input that caused it is left in WORK_DIR (crash-*, timeout-*,
# oom-*, leak-*) for `FUZZER <file>` to replay.
foreach(v FUZZER SEEDS WORK_DIR SECONDS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_fuzzer.cmake: -D${v}=... is required")
  endif()
endforeach()

get_filename_component(name ${FUZZER} NAME)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/corpus)
file(GLOB seeds ${SEEDS}/*)
file(COPY ${seeds} DESTINATION ${WORK_DIR}/corpus)

execute_process(
  COMMAND ${FUZZER} ${WORK_DIR}/corpus -max_total_time=${SECONDS} -rss_limit_mb=2048
    -timeout=10 -artifact_prefix=${WORK_DIR}/ -print_final_stats=1
  WORKING_DIRECTORY ${WORK_DIR}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${name} failed (${rc}); the failing input is in ${WORK_DIR}/ "
    "(replay: ${FUZZER} <file>)")
endif()
