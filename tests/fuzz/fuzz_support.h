// What troupe's libFuzzer targets share. Each target defines fuzz_target_name
// (its program's name, for messages). require() aborts on a broken invariant
// (libFuzzer then keeps the input); guarded() runs one input and turns an
// escaping exception into an abort that names it.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>

namespace troupe {

extern const char* const fuzz_target_name;

inline void require(bool cond, const char* what) {
  if (!cond) {
    std::fprintf(stderr, "%s: invariant broken: %s\n", fuzz_target_name, what);
    std::abort();
  }
}

template <class F>
void guarded(F&& run_one_input) {
  try {
    run_one_input();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: exception escaped: %s\n", fuzz_target_name, e.what());
    std::abort();
  }
}

}  // namespace troupe
