// An importance matrix as llama.cpp's llama-imatrix defines it: for every
// weight tensor that calibration activations reach, per input column the sum
// of x^2 over the tokens that reached it, and how many tokens did (one count
// per matrix: stacked MoE experts have one each). Read and written in both of
// llama.cpp's formats, so an imatrix made by either tool works in the other:
//   GGUF (general.type "imatrix"): per tensor NAME.in_sum2 f32 [width, n_mat]
//     and NAME.counts f32 [1, n_mat]; imatrix.datasets, imatrix.chunk_count,
//     imatrix.chunk_size.
//   legacy .dat: int32 n_entries; per entry int32 len, name, int32 ncall,
//     int32 nval, f32 values[nval] = mean x^2 * ncall; then int32 chunks and
//     int32 len + the dataset's file name.
// A plain value type; not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "infera/status.h"

namespace infera {

class GgufFile;

struct ImatrixEntry {
  int64_t width = 0;           // input columns of the weight
  std::vector<double> sum2;    // [n_mat, width]: sum of x^2 per column
  std::vector<double> counts;  // [n_mat]: tokens seen per matrix
  int64_t n_mat() const { return static_cast<int64_t>(counts.size()); }
};

class Imatrix {
 public:
  // GGUF tensor name ("blk.0.attn_q.weight") -> its entry.
  std::map<std::string, ImatrixEntry> entries;
  std::vector<std::string> datasets;  // calibration files it was computed on
  uint32_t chunk_count = 0;           // chunks of calibration text
  uint32_t chunk_size = 0;            // tokens per chunk

  // Adds x [rows, width] to `name`'s matrix `mat` of n_mat (created on first
  // use; a mismatched width or n_mat is an error).
  Status Add(const std::string& name, int64_t n_mat, int64_t mat, const float* x, int64_t rows, int64_t width);

  // What llama-quantize weights `name` with: per column mean x^2 [n_mat *
  // width] (1 for a matrix that saw no token); empty if absent.
  std::vector<float> Importance(const std::string& name) const;

  // Reads either format (GGUF by its magic, else legacy).
  static StatusOr<Imatrix> Load(const std::string& path);
  // Writes GGUF, or the legacy format when `legacy`; atomically.
  Status Save(const std::string& path, bool legacy) const;
  // The imatrix in a parsed GGUF file; `path` for messages.
  static StatusOr<Imatrix> FromGguf(const GgufFile& file, const std::string& path);
  // Parses legacy bytes (used by the fuzzer); `name` for messages.
  static StatusOr<Imatrix> ParseLegacy(const std::string& bytes, const std::string& name);
};

}  // namespace infera
