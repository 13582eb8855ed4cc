// Reference quantizers of the GGUF block formats, producing exactly the bytes
// of llama.cpp's reference quantizers (used by llama-quantize without an
// importance matrix), so files made by infera and by llama.cpp agree.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace infera {

bool CanQuantize(DType t);
// src [n] -> dst (RowBytes(t, n) bytes). n must be a multiple of the block.
void QuantizeRow(DType t, const float* src, uint8_t* dst, int64_t n);
// llama.cpp's general.file_type (LLAMA_FTYPE_*) for a file mostly of type t.
uint32_t LlamaFileType(DType t);

}  // namespace infera
