// Internal invariants. TROUPE_CHECK logs the failed condition with its place
// and aborts: it guards what the code itself guarantees, never user input
// (user input gets a result<T> error, see common/result.h).
#pragma once

#include <cstdio>
#include <cstdlib>

#define TROUPE_CHECK(cond)                                                     \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "troupe: check failed: %s at %s:%d\n", #cond,       \
                   __FILE__, __LINE__);                                        \
      std::abort();                                                            \
    }                                                                          \
  } while (0)

#define TROUPE_CHECK_MSG(cond, msg)                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "troupe: check failed: %s (%s) at %s:%d\n", #cond,  \
                   (msg), __FILE__, __LINE__);                                 \
      std::abort();                                                            \
    }                                                                          \
  } while (0)
