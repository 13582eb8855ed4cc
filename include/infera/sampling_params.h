// Per-request sampling parameters (defaults as llama.cpp's).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace infera {

struct SamplingParams {
  float temperature = 0.8f;     // 0: greedy
  int32_t top_k = 40;           // <= 0: off
  float top_p = 0.95f;          // 1: off
  float min_p = 0.05f;          // 0: off
  float repetition_penalty = 1.0f;  // 1: off (llama.cpp's repeat_penalty)
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t penalty_last_n = 64;  // tokens the penalties look back over; -1: all
  uint64_t seed = 0;
  bool has_seed = false;        // false: seeded from std::random_device
};

}  // namespace infera
