#pragma once

#include <cstdio>
#include <cstdlib>

// KONN_CHECK(cond, msg): always on; for "cannot continue" (broken invariant, impossible state).
// Never for peer or network input: those get an error answer, not a crash.
#define KONN_CHECK(cond, msg)                                                          \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "KONN_CHECK failed at %s:%d: %s (%s)\n", __FILE__, __LINE__, \
                   #cond, msg);                                                        \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

// KONN_ASSERT(cond): invariants checked in debug builds only.
#ifdef NDEBUG
#define KONN_ASSERT(cond) ((void)0)
#else
#define KONN_ASSERT(cond) KONN_CHECK(cond, "assertion")
#endif
