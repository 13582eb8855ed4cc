// CHECK(cond) for invariants whose failure is a bug in infera (never for bad
// input: that returns a Status). Prints file:line and aborts.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace infera::internal {
[[noreturn]] inline void CheckFailed(const char* file, int line, const char* cond) {
  std::fprintf(stderr, "infera: CHECK failed at %s:%d: %s\n", file, line, cond);
  std::abort();
}
}  // namespace infera::internal

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (__builtin_expect(!(cond), 0)) ::infera::internal::CheckFailed(__FILE__, __LINE__, #cond); \
  } while (0)

#ifdef NDEBUG
#define DCHECK(cond) do { (void)sizeof(cond); } while (0)
#else
#define DCHECK(cond) CHECK(cond)
#endif
