// The stored form of one full KV block in the offload tiers (disk, Redis):
// a self-describing, checksummed byte string. Little-endian:
//   magic "IKVB" (u32) | version (u32) | fingerprint (u64) | chain key (u64)
//   | block_size (u32) | payload kind (u32) | payload bytes (u64)
//   | tokens [block_size] (i32) | payload | XXH3-64 of everything before (u64)
// The fingerprint names the model and KV layout the payload belongs to, the
// chain key the block's prefix (BlockPool::ChainKey), the tokens the block's
// own content; a load checks all of them, so a stale, foreign or damaged
// blob is a miss, never wrong K/V. The payload is opaque here (its layout is
// the engine's: engine/kv_block_io.h).
//
// Thread-safety: free functions on values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "infera/status.h"

namespace infera::kv_offload {

struct BlockBlobHeader {
  uint64_t fingerprint = 0;
  uint64_t chain_key = 0;
  uint32_t payload_kind = 0;
};

// Encodes a blob; `payload` is copied.
std::string EncodeBlockBlob(const BlockBlobHeader& h, const int32_t* tokens, int32_t block_size,
                            std::string_view payload);

// Checks `blob` against what the reader expects (fingerprint, chain key,
// the block's tokens [block_size], the checksum, every size) and returns a
// view of its payload (into `blob`) and the payload kind. DataLoss names
// what did not match.
StatusOr<std::string_view> DecodeBlockBlob(std::string_view blob, uint64_t fingerprint, uint64_t chain_key,
                                           const int32_t* tokens, int32_t block_size, uint32_t* payload_kind);

// The tier key of a block: "infera:kv:<fingerprint hex>:<chain key hex>".
std::string BlockKey(uint64_t fingerprint, uint64_t chain_key);

// XXH3-64 of bytes (model fingerprints, checksums).
uint64_t Hash64(std::string_view bytes, uint64_t seed = 0);

}  // namespace infera::kv_offload
