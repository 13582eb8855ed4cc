// Large zero-initialized buffers whose memory the OS commits only as pages
// are first written (anonymous mmap), backed by transparent huge pages where
// the kernel allows them (madvise MADV_HUGEPAGE): one fault per 2 MiB
// instead of per 4 KiB. On virtual machines a 4 KiB first-touch fault can
// cost over 10 µs, so filling 160 MiB of fresh KV cache took ~0.5 s with
// small pages (docs/design.md, "KV offload tiers").
//
// Thread-safety: a buffer is plain memory; ownership is unique.
#pragma once

#include <cstddef>
#include <memory>

namespace infera {

struct LazyBufferDeleter {
  size_t bytes = 0;
  void operator()(void* p) const;
};
using LazyBuffer = std::unique_ptr<void, LazyBufferDeleter>;

// `bytes` of zeroed memory (null for 0 bytes); aborts if the address space
// is exhausted, like operator new.
LazyBuffer AllocateLazyBuffer(size_t bytes);

}  // namespace infera
