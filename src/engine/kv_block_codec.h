// One KV block's K/V as bytes, for the offload tiers (kv_offload/): the
// payload a stored block record carries (kv_offload/block_blob.h) and its
// decoder, which reads untrusted bytes (tests/fuzz/kv_block_fuzzer.cc).
// Apart from the offloader (kv_offloader.h) so that the fuzzer links only
// this and the record format, not the engine.
//
// Thread-safety: plain functions; a call reads or writes only the slots it
// is given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attention/kv_storage.h"
#include "infera/status.h"

namespace infera {

// Payload kinds of a stored block (kv_offload/block_blob.h).
enum KvPayloadKind : uint32_t { kKvPayloadF32 = 1, kKvPayloadQ8 = 2 };

// Bytes of one block's payload of `kind` for `kv`'s layers and heads.
size_t KvPayloadBytes(const KvStorage& kv, int32_t block_size, uint32_t kind);
// Encodes slots [first_slot, first_slot + block_size) of every layer and KV
// head: per layer, per KV head, K [block_size][head_dim] then V rows (f32),
// or K int8, K scales [block_size], V int8 rows, V scales (q8; from f32
// storage each row is quantized, x ≈ scale * q). K is in the cache's tiled
// layout (FlashKIndex over the block's own slots) when the block is a whole
// number of 16-slot tiles (one memcpy each way), else row-major.
std::string EncodeKvBlock(KvStorage& kv, int32_t first_slot, int32_t block_size, uint32_t kind);
// Writes a payload back into those slots (f32 storage takes f32 or q8
// payloads, q8 storage q8 ones); DataLoss on a size or kind mismatch.
Status DecodeKvBlock(std::string_view payload, uint32_t kind, KvStorage& kv, int32_t first_slot, int32_t block_size);

}  // namespace infera
