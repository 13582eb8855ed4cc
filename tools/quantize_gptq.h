// `infera quantize --method gptq` and `--awq`: calibrated quantization of
// every layer matrix of a model, layer by layer — each layer is calibrated on
// the model whose earlier layers are already done (their f32 copies hold the
// scaled and, with GPTQ, dequantized weights), so later layers see and
// correct the earlier layers' errors. AWQ scales are folded into the RMSNorm
// weights (attention and FFN inputs) and into ffn_up's rows (ffn_down's
// input); with GPTQ the layer's Hessians are rescaled to match.
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
  bool gptq_enabled = false;
  GptqOptions gptq;        // type is chosen per tensor
  bool awq = false;
  int awq_grid = 20;
  int threads = 0;
};

// GGUF tensor name -> its blocks in the type `choose` gave it (only the
// tensors GPTQ wrote; the writer rounds the rest, AWQ-scaled or not).
using EncodedTensors = std::map<std::string, std::vector<uint8_t>>;

// Edits lm's layer matrices and norms in place (f32 copies). `choose` sees
// the GGUF tensor name of each matrix. AWQ needs separate Q/K/V and
// gate/up, pre-norm blocks and no experts (else an error).
StatusOr<EncodedTensors> RunCalibrated(LoadedModel* lm, const TypeChooser& choose, const GptqRunOptions& o,
                                 const RuntimeOptions& rt);

}  // namespace infera::cli
