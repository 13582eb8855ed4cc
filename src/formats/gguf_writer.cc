#include "formats/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <memory>

#include "base/output_file.h"

namespace infera {
namespace {

template <typename T>
void Put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}
void PutString(std::string* out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}
void PutType(std::string* out, GgufType t) { Put<uint32_t>(out, static_cast<uint32_t>(t)); }

void EncodeScalarPayload(std::string* out, GgufType t, const GgufValue& v, size_t k, bool from_array) {
  auto U = [&]() { return from_array ? v.arr_u[k] : v.u; };
  auto I = [&]() { return from_array ? v.arr_i[k] : v.i; };
  auto F = [&]() { return from_array ? v.arr_f[k] : v.f; };
  switch (t) {
    case GgufType::kUint8: Put<uint8_t>(out, static_cast<uint8_t>(U())); break;
    case GgufType::kBool: Put<uint8_t>(out, U() ? 1 : 0); break;
    case GgufType::kUint16: Put<uint16_t>(out, static_cast<uint16_t>(U())); break;
    case GgufType::kUint32: Put<uint32_t>(out, static_cast<uint32_t>(U())); break;
    case GgufType::kUint64: Put<uint64_t>(out, U()); break;
    case GgufType::kInt8: Put<int8_t>(out, static_cast<int8_t>(I())); break;
    case GgufType::kInt16: Put<int16_t>(out, static_cast<int16_t>(I())); break;
    case GgufType::kInt32: Put<int32_t>(out, static_cast<int32_t>(I())); break;
    case GgufType::kInt64: Put<int64_t>(out, I()); break;
    case GgufType::kFloat32: Put<float>(out, static_cast<float>(F())); break;
    case GgufType::kFloat64: Put<double>(out, F()); break;
    case GgufType::kString: PutString(out, from_array ? v.arr_s[k] : v.s); break;
    case GgufType::kArray: break;
  }
}

void EncodeValue(std::string* out, const GgufValue& v) {
  if (v.type != GgufType::kArray) {
    EncodeScalarPayload(out, v.type, v, 0, false);
    return;
  }
  PutType(out, v.elem_type);
  Put<uint64_t>(out, v.ArraySize());
  if (v.elem_type == GgufType::kArray) {
    for (const auto& sub : v.arr_a) EncodeValue(out, sub);
    return;
  }
  for (size_t k = 0; k < v.ArraySize(); ++k) EncodeScalarPayload(out, v.elem_type, v, k, true);
}

}  // namespace

void GgufWriter::SetEncoded(const std::string& key, std::string encoded) {
  for (auto& kv : kv_) {
    if (kv.key == key) {
      kv.encoded = std::move(encoded);
      return;
    }
  }
  kv_.push_back({key, std::move(encoded)});
}

void GgufWriter::SetValue(const std::string& key, const GgufValue& v) {
  std::string e;
  PutType(&e, v.type);
  EncodeValue(&e, v);
  if (key == "general.alignment") {
    if (auto a = v.AsInt(); a && *a > 0) alignment_ = static_cast<uint64_t>(*a);
  }
  SetEncoded(key, std::move(e));
}

void GgufWriter::SetString(const std::string& key, const std::string& s) {
  GgufValue v; v.type = GgufType::kString; v.s = s; SetValue(key, v);
}
void GgufWriter::SetU32(const std::string& key, uint32_t x) {
  GgufValue v; v.type = GgufType::kUint32; v.u = x; SetValue(key, v);
}
void GgufWriter::SetI32(const std::string& key, int32_t x) {
  GgufValue v; v.type = GgufType::kInt32; v.i = x; SetValue(key, v);
}
void GgufWriter::SetF32(const std::string& key, float x) {
  GgufValue v; v.type = GgufType::kFloat32; v.f = x; SetValue(key, v);
}
void GgufWriter::SetBool(const std::string& key, bool x) {
  GgufValue v; v.type = GgufType::kBool; v.u = x; SetValue(key, v);
}
void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& a) {
  GgufValue v; v.type = GgufType::kArray; v.elem_type = GgufType::kString; v.arr_s = a; SetValue(key, v);
}
void GgufWriter::SetF32Array(const std::string& key, const std::vector<float>& a) {
  GgufValue v; v.type = GgufType::kArray; v.elem_type = GgufType::kFloat32;
  v.arr_f.assign(a.begin(), a.end());
  SetValue(key, v);
}
void GgufWriter::SetI32Array(const std::string& key, const std::vector<int32_t>& a) {
  GgufValue v; v.type = GgufType::kArray; v.elem_type = GgufType::kInt32;
  v.arr_i.assign(a.begin(), a.end());
  SetValue(key, v);
}

void GgufWriter::AddTensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                           const void* data, uint64_t nbytes) {
  tensors_.push_back({name, type, ne, data, nbytes, SIZE_MAX});
}

void GgufWriter::AddTensorCopy(const std::string& name, DType type, const std::vector<int64_t>& ne,
                               std::vector<uint8_t> bytes) {
  owned_.push_back(std::move(bytes));
  tensors_.push_back({name, type, ne, nullptr, owned_.back().size(), owned_.size() - 1});
}

Status GgufWriter::Write(const std::string& path) const {
  std::string header;
  Put<uint32_t>(&header, 0x46554747);
  Put<uint32_t>(&header, 3);
  Put<uint64_t>(&header, tensors_.size());
  Put<uint64_t>(&header, kv_.size());
  for (const auto& kv : kv_) {
    PutString(&header, kv.key);
    header += kv.encoded;
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const auto& t : tensors_) {
    PutString(&header, t.name);
    Put<uint32_t>(&header, static_cast<uint32_t>(t.ne.size()));
    for (auto d : t.ne) Put<uint64_t>(&header, static_cast<uint64_t>(d));
    Put<uint32_t>(&header, static_cast<uint32_t>(t.type));
    Put<uint64_t>(&header, offset);
    offsets.push_back(offset);
    offset += (t.nbytes + alignment_ - 1) / alignment_ * alignment_;
  }
  header.resize((header.size() + alignment_ - 1) / alignment_ * alignment_, '\0');

  // A temporary file renamed over `path` at the end: an input being read
  // through mmap is never truncated, and a failed write leaves no torn file.
  ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out, OutputFile::Create(path));
  FILE* f = out->stream();
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  static const char kZeros[64] = {};
  for (size_t k = 0; ok && k < tensors_.size(); ++k) {
    const auto& t = tensors_[k];
    const void* data = t.owned_index == SIZE_MAX ? t.data : owned_[t.owned_index].data();
    ok = std::fwrite(data, 1, t.nbytes, f) == t.nbytes;
    // Every tensor, the last included, is padded to the alignment: ggml's
    // reader reads the data section as the sum of padded sizes and refuses a
    // file that ends early (gguf-py and ggml write it so).
    uint64_t pad = (alignment_ - t.nbytes % alignment_) % alignment_;
    while (ok && pad > 0) {
      size_t n = std::min<uint64_t>(pad, sizeof(kZeros));
      ok = std::fwrite(kZeros, 1, n, f) == n;
      pad -= n;
    }
  }
  if (!ok) return InvalidArgument(path + ": write failed: " + std::strerror(errno));
  RETURN_IF_ERROR(out->Commit());
  return Status::Ok();
}

}  // namespace infera
