// Rotary position embedding (RoPE) of query and key heads, with the context
// extension methods in use: linear interpolation, per-frequency divisors
// (llama3's, LongRoPE's short / long factors) and YaRN.
//
// Thread-safety: immutable after construction; Apply may run on any number
// of threads at once.
#pragma once

#include <vector>

namespace infera {

// kNorm: rotate adjacent pairs (x[2i], x[2i+1]) — GGUF llama and llama2.c.
// kNeox: rotate halves (x[i], x[i + d/2]) — HF layout, GGUF qwen2, gemma, phi3.
enum class RopeStyle { kNorm, kNeox };

struct RopeParams {
  int rope_dim = 0;
  float theta = 10000.0f;
  RopeStyle style = RopeStyle::kNorm;
  float linear_factor = 1.0f;       // positions divided by this (1: none)
  std::vector<float> freq_factors;  // [rope_dim / 2] divisors of the frequencies (empty: none)
  // YaRN (yarn_factor > 1): frequencies blended between interpolated
  // (/ factor) and extrapolated by a ramp over the dims whose wavelength lies
  // between the beta_fast and beta_slow rotations in the original context.
  float yarn_factor = 1.0f;
  int yarn_original_ctx = 0;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  // cos and sin are multiplied by this (YaRN's and LongRoPE's attention
  // factor; 1: none).
  float mscale = 1.0f;
};

class Rope {
 public:
  Rope() = default;
  explicit Rope(const RopeParams& p);

  // x [n_heads, head_dim]: rotates the first rope_dim dims of every head by
  // position `pos`, in place.
  void Apply(float* x, int n_heads, int head_dim, int pos) const;

  int rope_dim() const { return rope_dim_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }

 private:
  int rope_dim_ = 0;
  RopeStyle style_ = RopeStyle::kNorm;
  float mscale_ = 1.0f;
  std::vector<float> inv_freq_;  // [rope_dim / 2]
};

// YaRN's default attention factor for a context extension `factor`.
float YarnDefaultMscale(float factor);

}  // namespace infera
