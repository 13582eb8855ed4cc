#include "formats/llama2c.h"

#include <climits>
#include <cstring>

#include <fmt/format.h>

namespace infera {
namespace {

constexpr uint32_t kV1Magic = 0x616b3432;  // "ak42"

Status ValidateHeader(const Llama2cHeader& h, const std::string& name) {
  auto bad = [&](const std::string& what) {
    return DataLoss(name + ": invalid llama2.c checkpoint: " + what);
  };
  if (h.dim <= 0 || h.dim > 65536) return bad(fmt::format("dim {} out of range", h.dim));
  if (h.hidden_dim <= 0 || h.hidden_dim > 1 << 20) return bad(fmt::format("hidden_dim {} out of range", h.hidden_dim));
  if (h.n_layers <= 0 || h.n_layers > 1024) return bad(fmt::format("n_layers {} out of range", h.n_layers));
  if (h.n_heads <= 0 || h.dim % h.n_heads != 0) return bad(fmt::format("n_heads {} does not divide dim {}", h.n_heads, h.dim));
  if (h.n_kv_heads <= 0 || h.n_heads % h.n_kv_heads != 0) return bad(fmt::format("n_kv_heads {} does not divide n_heads {}", h.n_kv_heads, h.n_heads));
  if (h.vocab_size <= 0 || h.vocab_size > 1 << 24) return bad(fmt::format("vocab_size {} out of range", h.vocab_size));
  if (h.seq_len <= 0 || h.seq_len > 1 << 24) return bad(fmt::format("seq_len {} out of range", h.seq_len));
  if ((h.dim / h.n_heads) % 2 != 0) return bad("head size must be even");
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<Llama2cCheckpoint>> Llama2cCheckpoint::Open(const std::string& path) {
  ASSIGN_OR_RETURN(auto map, MappedFile::Open(path));
  ASSIGN_OR_RETURN(auto ck, Parse(map->data(), map->size(), path));
  ck->map_ = std::move(map);
  return ck;
}

StatusOr<std::unique_ptr<Llama2cCheckpoint>> Llama2cCheckpoint::Parse(const uint8_t* data, size_t size,
                                                                      const std::string& name) {
  std::unique_ptr<Llama2cCheckpoint> ck(new Llama2cCheckpoint());
  Llama2cHeader& h = ck->header_;
  if (size < 28) return DataLoss(name + ": file too short for a llama2.c checkpoint header");
  uint32_t magic;
  std::memcpy(&magic, data, 4);
  size_t offset;
  int32_t p[7];
  if (magic == kV1Magic) {
    if (size < 256) return DataLoss(name + ": truncated llama2.c v1 header");
    int32_t version;
    std::memcpy(&version, data + 4, 4);
    if (version != 1) return Unimplemented(fmt::format("{}: llama2.c checkpoint version {} is not supported (only 0 and 1)", name, version));
    std::memcpy(p, data + 8, sizeof(p));
    h.shared_classifier = data[36] != 0;
    h.version = 1;
    offset = 256;
  } else {
    std::memcpy(p, data, sizeof(p));
    offset = 28;
  }
  h.dim = p[0]; h.hidden_dim = p[1]; h.n_layers = p[2]; h.n_heads = p[3]; h.n_kv_heads = p[4];
  h.vocab_size = p[5]; h.seq_len = p[6];
  if (h.version == 0) {
    // A negative vocab size marks an unshared classifier.
    h.shared_classifier = h.vocab_size > 0;
    if (h.vocab_size < 0 && h.vocab_size > INT32_MIN) h.vocab_size = -h.vocab_size;
  }
  RETURN_IF_ERROR(ValidateHeader(h, name));

  const int64_t dim = h.dim, hd = h.hidden_dim, L = h.n_layers, V = h.vocab_size;
  const int64_t head = dim / h.n_heads, kv_dim = head * h.n_kv_heads;
  // Sequence of (name pattern, ne, per-layer?) in file order.
  struct Part { std::string name; std::vector<int64_t> ne; bool per_layer; };
  std::vector<Part> parts;
  const Part embd{"token_embd.weight", {dim, V}, false}, attn_norm{"attn_norm.weight", {dim}, true},
      wq{"attn_q.weight", {dim, dim}, true}, wk{"attn_k.weight", {dim, kv_dim}, true},
      wv{"attn_v.weight", {dim, kv_dim}, true}, wo{"attn_output.weight", {dim, dim}, true},
      ffn_norm{"ffn_norm.weight", {dim}, true}, w1{"ffn_gate.weight", {dim, hd}, true},
      w2{"ffn_down.weight", {hd, dim}, true}, w3{"ffn_up.weight", {dim, hd}, true},
      out_norm{"output_norm.weight", {dim}, false}, freqs{"", {head / 2 * h.seq_len}, false},
      out{"output.weight", {dim, V}, false};
  if (h.version == 0) {
    parts = {embd, attn_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3, out_norm, freqs, freqs};
  } else {
    parts = {attn_norm, ffn_norm, out_norm, embd, wq, wk, wv, wo, w1, w2, w3};
  }
  if (!h.shared_classifier) parts.push_back(out);

  uint64_t need = offset;
  for (const auto& part : parts) {
    uint64_t n = 1;
    for (auto d : part.ne) n *= static_cast<uint64_t>(d);
    need += n * 4 * (part.per_layer ? L : 1);
  }
  if (need != size) {
    return DataLoss(fmt::format("{}: invalid llama2.c checkpoint: header implies {} bytes but the file has {}{}",
                                name, need, size, need > size ? " (truncated?)" : ""));
  }
  for (const auto& part : parts) {
    uint64_t n = 1;
    for (auto d : part.ne) n *= static_cast<uint64_t>(d);
    for (int64_t l = 0; l < (part.per_layer ? L : 1); ++l) {
      if (!part.name.empty()) {
        TensorView tv;
        tv.name = part.per_layer ? fmt::format("blk.{}.{}", l, part.name) : part.name;
        tv.type = DType::kF32;
        tv.ne = part.ne;
        tv.data = data + offset;
        tv.nbytes = n * 4;
        ck->tensors_.push_back(std::move(tv));
      }
      offset += n * 4;
    }
  }
  return ck;
}

StatusOr<Llama2cVocab> ParseLlama2cTokenizer(const uint8_t* data, size_t size, const std::string& name,
                                             int vocab_size) {
  auto bad = [&](const std::string& what) { return DataLoss(name + ": invalid llama2.c tokenizer: " + what); };
  if (size < 4) return bad("file too short");
  int32_t max_len;
  std::memcpy(&max_len, data, 4);
  if (max_len <= 0 || max_len > 1 << 16) return bad(fmt::format("max_token_length {} out of range", max_len));
  Llama2cVocab v;
  size_t pos = 4;
  while (vocab_size < 0 ? pos < size : static_cast<int>(v.pieces.size()) < vocab_size) {
    if (size - pos < 8) return bad(fmt::format("truncated at token {}", v.pieces.size()));
    float score;
    int32_t len;
    std::memcpy(&score, data + pos, 4);
    std::memcpy(&len, data + pos + 4, 4);
    pos += 8;
    if (len < 0 || static_cast<size_t>(len) > size - pos) return bad(fmt::format("token {} length {} out of range", v.pieces.size(), len));
    v.pieces.emplace_back(reinterpret_cast<const char*>(data + pos), len);
    v.scores.push_back(score);
    pos += len;
    if (v.pieces.size() > (1u << 24)) return bad("too many tokens");
  }
  if (v.pieces.empty()) return bad("no tokens");
  return v;
}

StatusOr<Llama2cVocab> ReadLlama2cTokenizer(const std::string& path, int vocab_size) {
  ASSIGN_OR_RETURN(auto map, MappedFile::Open(path));
  return ParseLlama2cTokenizer(map->data(), map->size(), path, vocab_size);
}

}  // namespace infera
