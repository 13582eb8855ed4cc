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
  bool true_sequential = false;  // GPTQ: Hessians per stage of a layer (see RunCalibrated)
  bool awq = false;
  int awq_grid = 20;
  double smooth_alpha = -1;  // SmoothQuant's alpha in [0, 1]; < 0: off
  double outlier_threshold = 0;  // W8A8 outlier columns above this |x| (LLM.int8()); 0: off
  int threads = 0;
};

// GGUF tensor name -> its blocks in the type `choose` gave it (only the
// tensors GPTQ wrote; the writer rounds the rest, AWQ-scaled or not).
using EncodedTensors = std::map<std::string, std::vector<uint8_t>>;

// With true_sequential (the GPTQ paper's option) a layer's matrices are done
// in forward order — Q/K/V, the attention output, gate/up, down — each
// stage's Hessians collected after the earlier stages are quantized (four
// calibration passes per layer instead of one).
// Edits lm's layer matrices and norms in place (f32 copies). `choose` sees
// the GGUF tensor name of each matrix. AWQ needs separate Q/K/V and
// gate/up, pre-norm blocks and no experts (else an error).
StatusOr<EncodedTensors> RunCalibrated(LoadedModel* lm, const TypeChooser& choose, const GptqRunOptions& o,
                                 const RuntimeOptions& rt);

// W8A8 calibration: one pass over the calibration text records every layer
// input's per-channel |x| maximum, then for each group of matrices sharing an
// input (Q/K/V, gate/up, down):
//  - SmoothQuant (--smooth-alpha): SmoothQuantScales folded in, columns times
//    s, the attention / FFN RMSNorm weights (down: ffn_up's rows) divided by
//    s (the F32 model computes the same);
//  - LLM.int8() outliers (--outlier-threshold T): the input channels whose
//    maximum (after smoothing) exceeds T are taken out of the matrices (their
//    f32 columns zeroed, so W8A8's row scales ignore them) and returned as
//    outlier tensors, F16, to run in float beside the int8 product.
// Edits lm's f32 copies in place.
struct W8A8Report {
  int groups = 0;
  // max_j / median_j of the activation maxima of a group's input: the
  // largest over the groups and the mean, before and after smoothing.
  double peak_before = 0, peak_after = 0, mean_peak_before = 0, mean_peak_after = 0;
  int outlier_groups = 0;   // groups with outlier channels
  int64_t outlier_cols = 0;  // channels taken out, over all groups
  int64_t input_cols = 0;    // channels of all groups
};
// GGUF tensor name (…weight) -> its outlier columns (OutlierColumns' layout:
// sorted i32 columns, F16 [n_out, k] weights).
struct OutlierTensor {
  std::vector<int32_t> cols;
  std::vector<uint16_t> weight_f16;
  int64_t n_out = 0;
};
using OutlierTensors = std::map<std::string, OutlierTensor>;
StatusOr<W8A8Report> RunW8A8Calibration(LoadedModel* lm, const GptqRunOptions& o, const RuntimeOptions& rt,
                                        OutlierTensors* outliers);

}  // namespace infera::cli
