// `infera quantize --target-bpw B`: mixed precision by measurement. Each
// layer tensor is quantized alone into each candidate type (the others stay
// F32) and the KL divergence of the model's next-token distributions from
// the F32 model's is measured on calibration text; a greedy allocation then
// starts every tensor at the cheapest type and buys, under the budget of B
// bits per weight of the layer tensors, the upgrades with the largest KLD
// drop per extra bit.
#pragma once

#include <map>
#include <string>

#include "quant/imatrix.h"
#include "tools/cli_common.h"

namespace infera::cli {

struct MixOptions {
  double target_bpw = 0;
  std::string calib;
  int calib_tokens = 2048;
  int calib_ctx = 0;  // 0: 256, or the trained context if shorter
  int threads = 0;
};

// GGUF tensor name -> type, for every layer tensor. Prints the plan on
// stderr. `im` (may be null) weights the candidates' rounding. Converts the
// layer matrices to f32 copies (values unchanged on return).
StatusOr<std::map<std::string, DType>> PlanMixedPrecision(LoadedModel* lm, const MixOptions& o, const Imatrix* im,
                                                          const RuntimeOptions& rt);

}  // namespace infera::cli
