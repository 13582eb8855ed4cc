#include "tokenizer/sentencepiece_model.h"

#include <cstring>

#include <fmt/format.h>

namespace infera {
namespace {

class Wire {
 public:
  Wire(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}
  bool done() const { return p_ >= end_; }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) return false;
      const uint8_t b = *p_++;
      *v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  // Reads a tag; wire type in *wt.
  bool Tag(uint32_t* field, uint32_t* wt) {
    uint64_t t;
    if (!Varint(&t)) return false;
    *field = static_cast<uint32_t>(t >> 3);
    *wt = static_cast<uint32_t>(t & 7);
    return true;
  }
  bool Bytes(const uint8_t** data, size_t* len) {
    uint64_t n;
    if (!Varint(&n) || n > static_cast<uint64_t>(end_ - p_)) return false;
    *data = p_;
    *len = static_cast<size_t>(n);
    p_ += n;
    return true;
  }
  bool Fixed32(uint32_t* v) {
    if (end_ - p_ < 4) return false;
    std::memcpy(v, p_, 4);
    p_ += 4;
    return true;
  }
  bool Skip(uint32_t wt) {
    uint64_t v;
    const uint8_t* d;
    size_t n;
    switch (wt) {
      case 0: return Varint(&v);
      case 1: if (end_ - p_ < 8) return false; p_ += 8; return true;
      case 2: return Bytes(&d, &n);
      case 5: if (end_ - p_ < 4) return false; p_ += 4; return true;
      default: return false;
    }
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace

StatusOr<SentencePieceModel> ParseSentencePieceModel(const std::string& bytes, const std::string& name) {
  auto bad = [&](const std::string& what) { return DataLoss(name + ": invalid SentencePiece model: " + what); };
  SentencePieceModel m;
  Vocab& v = m.vocab;
  v.unk = 0;  // SentencePiece's defaults when the trainer spec omits them
  v.bos = 1;
  v.eos = 2;
  v.pad = -1;
  bool add_dummy_prefix = true;
  Wire w(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  while (!w.done()) {
    uint32_t field, wt;
    if (!w.Tag(&field, &wt)) return bad("truncated field tag");
    if ((field == 1 || field == 2 || field == 3) && wt == 2) {
      const uint8_t* d;
      size_t n;
      if (!w.Bytes(&d, &n)) return bad("truncated message");
      Wire sub(d, n);
      if (field == 1) {  // SentencePiece { piece = 1; score = 2; type = 3 }
        std::string piece;
        float score = 0;
        uint64_t type = 1;
        while (!sub.done()) {
          uint32_t f2, wt2;
          if (!sub.Tag(&f2, &wt2)) return bad("truncated piece");
          const uint8_t* pd;
          size_t pn;
          uint32_t bits;
          if (f2 == 1 && wt2 == 2) {
            if (!sub.Bytes(&pd, &pn)) return bad("truncated piece text");
            piece.assign(reinterpret_cast<const char*>(pd), pn);
          } else if (f2 == 2 && wt2 == 5) {
            if (!sub.Fixed32(&bits)) return bad("truncated score");
            std::memcpy(&score, &bits, 4);
          } else if (f2 == 3 && wt2 == 0) {
            if (!sub.Varint(&type)) return bad("truncated type");
          } else if (!sub.Skip(wt2)) {
            return bad("bad field in piece");
          }
        }
        v.pieces.push_back(std::move(piece));
        v.scores.push_back(score);
        v.types.push_back(type >= 1 && type <= 6 ? static_cast<TokenType>(type) : TokenType::kNormal);
        if (v.pieces.size() > (1u << 24)) return bad("too many pieces");
      } else if (field == 2) {  // TrainerSpec
        while (!sub.done()) {
          uint32_t f2, wt2;
          if (!sub.Tag(&f2, &wt2)) return bad("truncated trainer spec");
          uint64_t x;
          if (wt2 == 0 && (f2 == 3 || f2 == 35 || (f2 >= 40 && f2 <= 43))) {
            if (!sub.Varint(&x)) return bad("truncated trainer spec");
            const int32_t id = static_cast<int32_t>(static_cast<int64_t>(x));
            if (f2 == 3) m.model_type = static_cast<int>(x);
            else if (f2 == 35) m.byte_fallback = x != 0;
            else if (f2 == 40) v.unk = id;
            else if (f2 == 41) v.bos = id;
            else if (f2 == 42) v.eos = id;
            else v.pad = id;
          } else if (!sub.Skip(wt2)) {
            return bad("bad field in trainer spec");
          }
        }
      } else {  // NormalizerSpec { add_dummy_prefix = 3 }
        while (!sub.done()) {
          uint32_t f2, wt2;
          if (!sub.Tag(&f2, &wt2)) return bad("truncated normalizer spec");
          uint64_t x;
          if (f2 == 3 && wt2 == 0) {
            if (!sub.Varint(&x)) return bad("truncated normalizer spec");
            add_dummy_prefix = x != 0;
          } else if (!sub.Skip(wt2)) {
            return bad("bad field in normalizer spec");
          }
        }
      }
    } else if (!w.Skip(wt)) {
      return bad(fmt::format("bad wire type {} for field {}", wt, field));
    }
  }
  if (v.pieces.empty()) return bad("no pieces");
  const int32_t n = v.size();
  for (int32_t* id : {&v.unk, &v.bos, &v.eos, &v.pad}) {
    if (*id >= n || *id < 0) *id = -1;
  }
  v.add_space_prefix = add_dummy_prefix;
  v.Finalize();
  return m;
}

}  // namespace infera
