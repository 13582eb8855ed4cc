#include "quant/policy.h"

#include <cctype>
#include <cstdlib>

#include "quant/quantize.h"

namespace infera {
namespace {

// llama.cpp's use_more_bits: the first and last eighth of the layers and
// every third one in between.
bool UseMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// "blk.N.rest" -> N, or -1.
int LayerIndex(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  return std::atoi(name.c_str() + 4);
}

bool Contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

std::optional<QuantTarget> ParseQuantTarget(const std::string& given) {
  std::string name = given;
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name == "q4_k_m") return QuantTarget{name, DType::kQ4_K, 15, true};
  if (name == "q4_k_s") return QuantTarget{name, DType::kQ4_K, 14, true};
  if (name == "q5_k_m") return QuantTarget{name, DType::kQ5_K, 17, true};
  if (name == "q5_k_s") return QuantTarget{name, DType::kQ5_K, 16, true};
  if (name == "q3_k_m") return QuantTarget{name, DType::kQ3_K, 12, true};
  auto t = ParseDTypeName(name);
  if (!t || !CanQuantize(*t)) return std::nullopt;
  return QuantTarget{name, *t, LlamaFileType(*t), false};
}

DType FallbackForShape(DType t, int64_t n_in) {
  const int64_t block = GetDTypeInfo(t).block_size;
  if (n_in % block == 0) return t;
  DType f = DType::kF16;
  switch (t) {
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kIQ4_XS:
    case DType::kIQ3_S:
    case DType::kIQ2_XS: f = DType::kIQ4_NL; break;
    case DType::kQ4_K: f = DType::kQ5_0; break;
    case DType::kQ5_K: f = DType::kQ5_1; break;
    case DType::kQ6_K: f = DType::kQ8_0; break;
    default: break;
  }
  return n_in % GetDTypeInfo(f).block_size == 0 ? f : DType::kF16;
}

DType ChooseTensorType(const QuantTarget& t, const std::string& name, int64_t n_in, int n_layer,
                       const std::string& output_name, bool pure) {
  DType type = t.base;
  // MoE routers stay f32, as llama.cpp keeps them: a small tensor whose
  // rounding would change which experts run.
  if (Contains(name, "ffn_gate_inp")) return DType::kF32;
  if (!pure && GetDTypeInfo(t.base).quantized) {
    const int layer = LayerIndex(name);
    const bool iq2 = t.base == DType::kIQ2_XS;
    if (name == output_name) {
      // llama.cpp gives the 2-bit i-quant files a Q5_K output tensor.
      if (type != DType::kQ8_0 && type != DType::kW8A8) type = iq2 ? DType::kQ5_K : DType::kQ6_K;
    } else if (iq2 && Contains(name, "token_embd")) {
      type = DType::kQ2_K;  // as llama.cpp: no imatrix covers the embeddings
    } else if (iq2 && (Contains(name, "attn_v.weight") || (Contains(name, "ffn_down") && layer < n_layer / 8))) {
      type = DType::kQ2_K;  // llama.cpp's IQ2_XS rule (its Q4_K for attn_v with GQA >= 4 is not applied)
    } else if (t.mixture && Contains(name, "attn_v.weight")) {
      if ((t.name == "q4_k_m" || t.name == "q5_k_m") && UseMoreBits(layer, n_layer)) type = DType::kQ6_K;
      else if (t.name == "q4_k_s" && layer < 4) type = DType::kQ5_K;
      else if (t.name == "q3_k_m") type = layer < 2 ? DType::kQ5_K : DType::kQ4_K;
    } else if (t.mixture && Contains(name, "ffn_down")) {
      if ((t.name == "q4_k_m" || t.name == "q5_k_m") && UseMoreBits(layer, n_layer)) type = DType::kQ6_K;
      else if (t.name == "q4_k_s" && layer < n_layer / 8) type = DType::kQ5_K;
      else if (t.name == "q3_k_m") type = layer < n_layer / 16 ? DType::kQ5_K : DType::kQ4_K;
    } else if (t.mixture && Contains(name, "attn_output.weight")) {
      if (t.name == "q3_k_m") type = DType::kQ4_K;
    }
  }
  return FallbackForShape(type, n_in);
}

}  // namespace infera
