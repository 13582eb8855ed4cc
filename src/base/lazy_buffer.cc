#include "base/lazy_buffer.h"

#include <sys/mman.h>

#include <new>

namespace infera {

void LazyBufferDeleter::operator()(void* p) const {
  if (p != nullptr) ::munmap(p, bytes);
}

LazyBuffer AllocateLazyBuffer(size_t bytes) {
  if (bytes == 0) return LazyBuffer(nullptr, LazyBufferDeleter{0});
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  ::madvise(p, bytes, MADV_HUGEPAGE);  // a hint: ignored where THP is off
#endif
  return LazyBuffer(p, LazyBufferDeleter{bytes});
}

}  // namespace infera
