// Helpers shared by the unit tests: temp files, the shared data folder,
// small random models, random vectors and the kernel ISAs this CPU runs.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"

#include "model/arch/registry.h"
#include "model/config.h"
#include "tensor/dtype.h"
#include "tokenizer/tokenizer.h"

namespace infera::testing {

// A fresh directory under the system temp dir, removed at process exit.
std::string TempDir();
std::string SharedDir();  // ../shared beside the repository
bool SharedAvailable();
// Writes a random tiny GGUF (synthetic vocab) and returns its path.
std::string WriteTinyModel(const ModelConfig& c, DType type, uint64_t seed, const std::string& name);
ModelConfig TinyConfig();
// TinyConfig in a family's shape (its norms, biases, fused tensors, soft-caps,
// windows): 64 wide, 4 heads over 2 KV heads, a 256-token context; the MoE
// families with 4 experts of 32, 2 used (qwen2moe also a shared expert of 48).
ModelConfig TinyArchConfig(const ArchInfo& arch);
// n floats drawn from N(0, stddev^2).
std::vector<float> RandomVec(int64_t n, std::mt19937& rng, float stddev = 1.0f);
// The bundled default model's tokenizer (fails the calling test if absent).
std::unique_ptr<Tokenizer> DefaultTokenizer();
// Scalar, and every SIMD level this CPU supports (kernel tests run each).
std::vector<CpuIsa> AvailableIsas();

}  // namespace infera::testing
