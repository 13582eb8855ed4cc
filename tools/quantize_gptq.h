// `infera quantize --method gptq`: GPTQ over every layer matrix of a model,
// layer by layer — each layer is calibrated on the model whose earlier
// layers are already quantized (their f32 copies hold the dequantized
// weights), so later layers see and correct the earlier layers' errors.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "quant/gptq.h"
#include "tools/cli_common.h"
#include "tools/model_writer.h"

namespace infera::cli {

struct GptqRunOptions {
  std::string calib;       // calibration text file ("-": stdin)
  int calib_tokens = 4096;
  int calib_ctx = 0;       // 0: 256, or the trained context if shorter
  GptqOptions gptq;        // type is chosen per tensor
  int threads = 0;
};

// GGUF tensor name -> its blocks in the type `choose` gave it (only the
// tensors GPTQ can write; the writer rounds the rest).
using EncodedTensors = std::map<std::string, std::vector<uint8_t>>;

// Edits lm's layer matrices in place (f32 copies). `choose` sees the GGUF
// tensor name of each matrix.
StatusOr<EncodedTensors> RunGptq(LoadedModel* lm, const TypeChooser& choose, const GptqRunOptions& o,
                                 const RuntimeOptions& rt);

}  // namespace infera::cli
