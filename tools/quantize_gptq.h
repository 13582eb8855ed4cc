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
  double smooth_alpha = -1;  // SmoothQuant's alpha in [0, 1]; < 0: off
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

// SmoothQuant (--smooth-alpha): one calibration pass records every layer
// input's per-channel |x| maximum, then each group of matrices sharing an
// input (Q/K/V, gate/up, down) gets SmoothQuantScales folded in: columns
// times s, the attention / FFN RMSNorm weights (down: ffn_up's rows) divided
// by s. Edits lm's f32 copies in place; the F32 model computes the same.
struct SmoothReport {
  int groups = 0;
  // max_j / median_j of the activation maxima of a group's input: the
  // largest over the groups and the mean, before and after smoothing.
  double peak_before = 0, peak_after = 0, mean_peak_before = 0, mean_peak_after = 0;
};
StatusOr<SmoothReport> RunSmoothQuant(LoadedModel* lm, const GptqRunOptions& o, const RuntimeOptions& rt);

}  // namespace infera::cli
