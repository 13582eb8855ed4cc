#include "kv_offload/block_blob.h"

#include <cstring>

#include <fmt/format.h>
#include <xxhash.h>

namespace infera::kv_offload {
namespace {

constexpr uint32_t kMagic = 0x42564B49;  // "IKVB"
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 8 + 4 + 4 + 8;

template <typename T>
void Put(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
T Get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

uint64_t Hash64(std::string_view bytes, uint64_t seed) { return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed); }

std::string BlockKey(uint64_t fingerprint, uint64_t chain_key) {
  return fmt::format("infera:kv:{:016x}:{:016x}", fingerprint, chain_key);
}

std::string EncodeBlockBlob(const BlockBlobHeader& h, const int32_t* tokens, int32_t block_size,
                            std::string_view payload) {
  std::string s;
  s.reserve(kHeaderBytes + 4 * static_cast<size_t>(block_size) + payload.size() + 8);
  Put<uint32_t>(&s, kMagic);
  Put<uint32_t>(&s, kVersion);
  Put<uint64_t>(&s, h.fingerprint);
  Put<uint64_t>(&s, h.chain_key);
  Put<uint32_t>(&s, static_cast<uint32_t>(block_size));
  Put<uint32_t>(&s, h.payload_kind);
  Put<uint64_t>(&s, payload.size());
  s.append(reinterpret_cast<const char*>(tokens), 4 * static_cast<size_t>(block_size));
  s.append(payload);
  Put<uint64_t>(&s, Hash64(s));
  return s;
}

StatusOr<std::string_view> DecodeBlockBlob(std::string_view blob, uint64_t fingerprint, uint64_t chain_key,
                                           const int32_t* tokens, int32_t block_size, uint32_t* payload_kind) {
  const size_t token_bytes = 4 * static_cast<size_t>(block_size);
  if (blob.size() < kHeaderBytes + token_bytes + 8) return DataLoss(fmt::format("blob too short ({} bytes)", blob.size()));
  const char* p = blob.data();
  if (Get<uint32_t>(p) != kMagic) return DataLoss("not a KV block (bad magic)");
  if (Get<uint32_t>(p + 4) != kVersion) return DataLoss(fmt::format("KV block version {}", Get<uint32_t>(p + 4)));
  const uint64_t payload_bytes = Get<uint64_t>(p + 32);
  if (payload_bytes != blob.size() - kHeaderBytes - token_bytes - 8) return DataLoss("KV block size mismatch");
  const uint64_t sum = Get<uint64_t>(p + blob.size() - 8);
  if (Hash64(blob.substr(0, blob.size() - 8)) != sum) return DataLoss("KV block checksum mismatch");
  if (Get<uint64_t>(p + 8) != fingerprint) return DataLoss("KV block of another model or KV layout");
  if (Get<uint64_t>(p + 16) != chain_key) return DataLoss("KV block under the wrong key");
  if (Get<uint32_t>(p + 24) != static_cast<uint32_t>(block_size)) return DataLoss("KV block of another block size");
  if (token_bytes > 0 && std::memcmp(p + kHeaderBytes, tokens, token_bytes) != 0) return DataLoss("KV block of other tokens");
  *payload_kind = Get<uint32_t>(p + 28);
  return blob.substr(kHeaderBytes + token_bytes, payload_bytes);
}

}  // namespace infera::kv_offload
