// Rotary position embedding (RoPE) of query and key heads.
//
// Thread-safety: immutable after construction; Apply may run on any number
// of threads at once.
#pragma once

#include <vector>

namespace infera {

// kNorm: rotate adjacent pairs (x[2i], x[2i+1]) — GGUF llama and llama2.c.
// kNeox: rotate halves (x[i], x[i + d/2]) — HF layout, GGUF qwen2, gemma, phi3.
enum class RopeStyle { kNorm, kNeox };

class Rope {
 public:
  Rope() = default;
  // Frequencies theta^(-2i / rope_dim) for i < rope_dim / 2, each divided by
  // freq_factors[i] (llama3 / LongRoPE divisors; empty: none) and by
  // linear_factor (linear position interpolation).
  Rope(int rope_dim, float theta, float linear_factor, const std::vector<float>& freq_factors, RopeStyle style);

  // x [n_heads, head_dim]: rotates the first rope_dim dims of every head by
  // position `pos`, in place.
  void Apply(float* x, int n_heads, int head_dim, int pos) const;

  int rope_dim() const { return rope_dim_; }

 private:
  int rope_dim_ = 0;
  RopeStyle style_ = RopeStyle::kNorm;
  std::vector<float> inv_freq_;  // [rope_dim / 2]
};

}  // namespace infera
