// libFuzzer target: KV block records read back from the offload tiers (a
// Redis or a directory others can write: untrusted input) through the
// record check and the payload decoder. The input is sealed with a valid
// checksum, and the reader expects the fingerprint, key and tokens the
// record claims, so the fuzzer reaches every check after the checksum. Must
// never crash, whatever the bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "attention/kv_storage.h"
#include "engine/kv_offloader.h"
#include "kv_offload/block_blob.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace infera;
  std::string blob(reinterpret_cast<const char*>(data), size);
  const uint64_t sum = kv_offload::Hash64(blob);
  blob.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
  uint64_t fingerprint = 0, key = 0;
  uint32_t block_size = 0;
  if (size >= 28) {
    std::memcpy(&fingerprint, data + 8, 8);
    std::memcpy(&key, data + 16, 8);
    std::memcpy(&block_size, data + 24, 4);
  }
  block_size = block_size % 64;  // a small cache: 2 layers, 3 KV heads in all, 128 slots
  std::vector<int32_t> tokens(block_size);
  if (block_size > 0 && size >= 40 + 4 * size_t(block_size)) std::memcpy(tokens.data(), data + 40, 4 * size_t(block_size));
  uint32_t kind = 0;
  auto payload = kv_offload::DecodeBlockBlob(blob, fingerprint, key, tokens.data(), static_cast<int32_t>(block_size),
                                             &kind);
  if (!payload.ok() || block_size == 0) return 0;
  for (KvType type : {KvType::kF32, KvType::kQ8, KvType::kBF16}) {
    KvStorage kv({2, 1}, 128, 8, type);
    (void)DecodeKvBlock(*payload, kind, kv, 64, static_cast<int32_t>(block_size));
  }
  return 0;
}
