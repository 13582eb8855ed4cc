// Opens a model from a GGUF file, a Hugging Face folder (config.json +
// safetensors) or a llama2.c checkpoint, validating everything.
#pragma once

#include <memory>
#include <string>

#include "base/cpu_features.h"
#include "infera/status.h"
#include "model/model.h"
#include "model/shard.h"

namespace infera {

struct ModelLoadOptions {
  // A split model (--tp / --pp): load only world rank `rank`'s shard.
  ParallelLayout layout;
  int rank = 0;
  // The kernel ISA the weights will run on (KernelTable::isa): matrices take
  // the sparse layouts (2:4, mask) only where that ISA has their kernels,
  // so a forced lower ISA (--cpu-isa avx2) packs them dense.
  CpuIsa kernel_isa = CpuIsa::kAvx512;
  // The float matmuls will take bf16 products (KernelTable::matmul_bf16):
  // their F32 / F16 matrices are stored as bf16 (StoreFloatMatricesAsBf16;
  // the same results, fewer bytes per token).
  bool float_weights_bf16 = false;
};

StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& path, const ModelLoadOptions& opts = {});

}  // namespace infera
