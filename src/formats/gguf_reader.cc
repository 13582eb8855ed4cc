#include "formats/gguf_reader.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace infera {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 8;
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kMaxNameLength = 4096;

// Bounds-checked little-endian cursor over untrusted bytes.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  bool Read(T* out) {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool ReadString(std::string* out, uint64_t max_len) {
    uint64_t n;
    if (!Read(&n)) return false;
    if (n > remaining() || n > max_len) return false;
    out->assign(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return true;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

size_t ScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    case GgufType::kString: return 8;  // at least the length field
    case GgufType::kArray: return 12;  // at least type + count
  }
  return 1;
}

bool ValidType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

class Parser {
 public:
  Parser(const uint8_t* data, size_t size, const std::string& name)
      : cur_(data, size), name_(name) {}

  Status Error(const std::string& what) const {
    return DataLoss(fmt::format("{}: invalid GGUF: {} (at byte {})", name_, what, cur_.pos()));
  }

  // Reads one scalar of type t into v.
  bool ReadScalar(GgufType t, GgufValue* v) {
    v->type = t;
    switch (t) {
      case GgufType::kUint8: { uint8_t x; if (!cur_.Read(&x)) return false; v->u = x; return true; }
      case GgufType::kInt8: { int8_t x; if (!cur_.Read(&x)) return false; v->i = x; return true; }
      case GgufType::kUint16: { uint16_t x; if (!cur_.Read(&x)) return false; v->u = x; return true; }
      case GgufType::kInt16: { int16_t x; if (!cur_.Read(&x)) return false; v->i = x; return true; }
      case GgufType::kUint32: { uint32_t x; if (!cur_.Read(&x)) return false; v->u = x; return true; }
      case GgufType::kInt32: { int32_t x; if (!cur_.Read(&x)) return false; v->i = x; return true; }
      case GgufType::kUint64: { uint64_t x; if (!cur_.Read(&x)) return false; v->u = x; return true; }
      case GgufType::kInt64: { int64_t x; if (!cur_.Read(&x)) return false; v->i = x; return true; }
      case GgufType::kFloat32: { float x; if (!cur_.Read(&x)) return false; v->f = x; return true; }
      case GgufType::kFloat64: { double x; if (!cur_.Read(&x)) return false; v->f = x; return true; }
      case GgufType::kBool: {
        uint8_t x;
        if (!cur_.Read(&x)) return false;
        v->u = x != 0;
        return true;
      }
      case GgufType::kString: return cur_.ReadString(&v->s, cur_.remaining());
      case GgufType::kArray: return false;
    }
    return false;
  }

  Status ReadValue(GgufType t, GgufValue* v, int depth) {
    if (t != GgufType::kArray) {
      if (!ReadScalar(t, v)) return Error(fmt::format("truncated {} value", GgufTypeName(t)));
      return Status::Ok();
    }
    if (depth >= kMaxArrayDepth) return Error("arrays nested too deeply");
    v->type = GgufType::kArray;
    uint32_t et;
    uint64_t n;
    if (!cur_.Read(&et)) return Error("truncated array type");
    if (!ValidType(et)) return Error(fmt::format("unknown array element type {}", et));
    if (!cur_.Read(&n)) return Error("truncated array length");
    v->elem_type = static_cast<GgufType>(et);
    if (n > cur_.remaining() / ScalarSize(v->elem_type)) {
      return Error(fmt::format("array length {} exceeds the file", n));
    }
    switch (v->elem_type) {
      case GgufType::kString: v->arr_s.reserve(n); break;
      case GgufType::kArray: v->arr_a.reserve(n); break;
      case GgufType::kFloat32: case GgufType::kFloat64: v->arr_f.reserve(n); break;
      case GgufType::kInt8: case GgufType::kInt16: case GgufType::kInt32: case GgufType::kInt64:
        v->arr_i.reserve(n); break;
      default: v->arr_u.reserve(n); break;
    }
    GgufValue e;
    for (uint64_t k = 0; k < n; ++k) {
      if (v->elem_type == GgufType::kArray) {
        GgufValue sub;
        RETURN_IF_ERROR(ReadValue(GgufType::kArray, &sub, depth + 1));
        v->arr_a.push_back(std::move(sub));
        continue;
      }
      if (!ReadScalar(v->elem_type, &e)) return Error(fmt::format("truncated array element {}", k));
      switch (v->elem_type) {
        case GgufType::kString: v->arr_s.push_back(std::move(e.s)); break;
        case GgufType::kFloat32: case GgufType::kFloat64: v->arr_f.push_back(e.f); break;
        case GgufType::kInt8: case GgufType::kInt16: case GgufType::kInt32: case GgufType::kInt64:
          v->arr_i.push_back(e.i); break;
        default: v->arr_u.push_back(e.u); break;
      }
    }
    return Status::Ok();
  }

  Cursor cur_;
  const std::string& name_;
};

}  // namespace

const char* GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kUint8: return "u8";
    case GgufType::kInt8: return "i8";
    case GgufType::kUint16: return "u16";
    case GgufType::kInt16: return "i16";
    case GgufType::kUint32: return "u32";
    case GgufType::kInt32: return "i32";
    case GgufType::kFloat32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "str";
    case GgufType::kArray: return "arr";
    case GgufType::kUint64: return "u64";
    case GgufType::kInt64: return "i64";
    case GgufType::kFloat64: return "f64";
  }
  return "?";
}

uint64_t GgufValue::ArraySize() const {
  return arr_u.size() + arr_i.size() + arr_f.size() + arr_s.size() + arr_a.size();
}

bool GgufValue::IsInteger() const {
  switch (type) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kUint16: case GgufType::kInt16:
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kUint64: case GgufType::kInt64:
      return true;
    default: return false;
  }
}

std::optional<int64_t> GgufValue::AsInt() const {
  switch (type) {
    case GgufType::kUint8: case GgufType::kUint16: case GgufType::kUint32: case GgufType::kBool:
      return static_cast<int64_t>(u);
    case GgufType::kUint64:
      if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
      return static_cast<int64_t>(u);
    case GgufType::kInt8: case GgufType::kInt16: case GgufType::kInt32: case GgufType::kInt64:
      return i;
    default: return std::nullopt;
  }
}

std::optional<double> GgufValue::AsFloat() const {
  if (type == GgufType::kFloat32 || type == GgufType::kFloat64) return f;
  auto v = AsInt();
  if (v) return static_cast<double>(*v);
  return std::nullopt;
}

std::string GgufValue::DebugString(size_t max_items) const {
  switch (type) {
    case GgufType::kString: return s.size() > 60 ? "\"" + s.substr(0, 57) + "...\"" : "\"" + s + "\"";
    case GgufType::kFloat32: case GgufType::kFloat64: return fmt::format("{}", f);
    case GgufType::kBool: return u ? "true" : "false";
    case GgufType::kArray: {
      std::string out = fmt::format("[{} x {}]", ArraySize(), GgufTypeName(elem_type));
      if (!arr_s.empty()) {
        out += " {";
        for (size_t k = 0; k < std::min(max_items, arr_s.size()); ++k) {
          out += (k ? ", \"" : "\"") + arr_s[k].substr(0, 20) + "\"";
        }
        out += arr_s.size() > max_items ? ", ...}" : "}";
      }
      return out;
    }
    default: {
      auto v = AsInt();
      return v ? std::to_string(*v) : "?";
    }
  }
}

std::string TensorView::ShapeString() const {
  std::string s = "[";
  for (size_t k = 0; k < ne.size(); ++k) s += (k ? ", " : "") + std::to_string(ne[k]);
  return s + "]";
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(auto map, MappedFile::Open(path));
  const uint8_t* data = map->data();
  const size_t size = map->size();
  ASSIGN_OR_RETURN(auto file, Parse(data, size, path));
  file->map_ = std::move(map);
  return file;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(const uint8_t* data, size_t size,
                                                    const std::string& name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->name_ = name;
  f->size_ = size;
  Parser p(data, size, name);

  uint32_t magic;
  if (!p.cur_.Read(&magic)) return p.Error("file too short for a GGUF header");
  if (magic != kGgufMagic) {
    return DataLoss(name + ": not a GGUF file (bad magic)");
  }
  if (!p.cur_.Read(&f->version_)) return p.Error("truncated version");
  if (f->version_ == 1) return Unimplemented(name + ": GGUF version 1 is not supported (convert it with a newer llama.cpp)");
  if (f->version_ != 2 && f->version_ != 3) {
    return DataLoss(fmt::format("{}: unsupported GGUF version {}", name, f->version_));
  }
  uint64_t n_tensors, n_kv;
  if (!p.cur_.Read(&n_tensors) || !p.cur_.Read(&n_kv)) return p.Error("truncated header counts");
  // Each KV needs >= 8 (key len) + 4 (type) + 1 bytes; each tensor info >= 8 + 4 + 4 + 8.
  if (n_kv > p.cur_.remaining() / 13) return p.Error(fmt::format("metadata count {} exceeds the file", n_kv));
  if (n_tensors > p.cur_.remaining() / 24) return p.Error(fmt::format("tensor count {} exceeds the file", n_tensors));

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    if (!p.cur_.ReadString(&key, kMaxNameLength)) return p.Error(fmt::format("truncated or oversized key of metadata entry {}", k));
    uint32_t t;
    if (!p.cur_.Read(&t)) return p.Error("truncated metadata type for key '" + key + "'");
    if (!ValidType(t)) return p.Error(fmt::format("unknown metadata type {} for key '{}'", t, key));
    GgufValue v;
    RETURN_IF_ERROR(p.ReadValue(static_cast<GgufType>(t), &v, 0));
    if (f->kv_.count(key)) return p.Error("duplicate metadata key '" + key + "'");
    f->kv_.emplace(std::move(key), std::move(v));
  }

  if (auto it = f->kv_.find("general.alignment"); it != f->kv_.end()) {
    auto a = it->second.AsInt();
    if (!a || *a <= 0 || (*a & (*a - 1)) != 0 || *a > (1 << 20)) {
      return p.Error("general.alignment must be a power of two");
    }
    f->alignment_ = static_cast<uint64_t>(*a);
  }

  struct RawInfo { uint64_t offset; uint64_t nbytes; };
  std::vector<RawInfo> raw;
  raw.reserve(n_tensors);
  f->tensors_.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    TensorView tv;
    if (!p.cur_.ReadString(&tv.name, kMaxNameLength)) return p.Error(fmt::format("truncated or oversized name of tensor {}", k));
    uint32_t n_dims;
    if (!p.cur_.Read(&n_dims)) return p.Error("truncated tensor info for '" + tv.name + "'");
    if (n_dims == 0 || n_dims > kMaxDims) return p.Error(fmt::format("tensor '{}' has {} dims (1..4 allowed)", tv.name, n_dims));
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne;
      if (!p.cur_.Read(&ne)) return p.Error("truncated dims of tensor '" + tv.name + "'");
      if (ne == 0 || ne > (uint64_t{1} << 40)) return p.Error(fmt::format("tensor '{}' has invalid dim {}", tv.name, ne));
      if (n_elements > (uint64_t{1} << 52) / ne) return p.Error("tensor '" + tv.name + "' has too many elements");
      n_elements *= ne;
      tv.ne.push_back(static_cast<int64_t>(ne));
    }
    uint32_t type;
    uint64_t offset;
    if (!p.cur_.Read(&type) || !p.cur_.Read(&offset)) return p.Error("truncated tensor info for '" + tv.name + "'");
    auto info = GetDTypeInfo(type);
    if (!info) return p.Error(fmt::format("tensor '{}' has unknown type {}", tv.name, type));
    tv.type = info->type;
    if (tv.ne[0] % info->block_size != 0) {
      return p.Error(fmt::format("tensor '{}': row length {} is not a multiple of the {} block size {}",
                                 tv.name, tv.ne[0], info->name, info->block_size));
    }
    if (offset % f->alignment_ != 0) return p.Error(fmt::format("tensor '{}' offset {} is not aligned to {}", tv.name, offset, f->alignment_));
    tv.nbytes = n_elements / info->block_size * info->type_size;
    if (f->tensor_index_.count(tv.name)) return p.Error("duplicate tensor name '" + tv.name + "'");
    f->tensor_index_[tv.name] = f->tensors_.size();
    raw.push_back({offset, tv.nbytes});
    f->tensors_.push_back(std::move(tv));
  }

  const uint64_t header_end = p.cur_.pos();
  const uint64_t data_start = (header_end + f->alignment_ - 1) / f->alignment_ * f->alignment_;
  const uint64_t data_size = size > data_start ? size - data_start : 0;
  // Bounds and overlap checks on the data section.
  std::vector<size_t> order(raw.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return raw[a].offset < raw[b].offset; });
  uint64_t prev_end = 0;
  std::string prev_name;
  for (size_t k : order) {
    const auto& r = raw[k];
    const auto& tv = f->tensors_[k];
    if (r.offset > data_size || r.nbytes > data_size - r.offset) {
      return DataLoss(fmt::format("{}: invalid GGUF: tensor '{}' data [{}, {}) lies past the end of the file (data section is {} bytes; truncated file?)",
                                  name, tv.name, r.offset, r.offset + r.nbytes, data_size));
    }
    if (r.offset < prev_end) {
      return DataLoss(fmt::format("{}: invalid GGUF: tensors '{}' and '{}' overlap", name, prev_name, tv.name));
    }
    prev_end = r.offset + r.nbytes;
    prev_name = tv.name;
  }
  for (size_t k = 0; k < raw.size(); ++k) f->tensors_[k].data = data + data_start + raw[k].offset;
  return f;
}

const TensorView* GgufFile::FindTensor(const std::string& n) const {
  auto it = tensor_index_.find(n);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

std::optional<std::string> GgufFile::GetString(const std::string& key) const {
  const auto* v = Find(key);
  if (!v || v->type != GgufType::kString) return std::nullopt;
  return v->s;
}

std::optional<int64_t> GgufFile::GetInt(const std::string& key) const {
  const auto* v = Find(key);
  return v ? v->AsInt() : std::nullopt;
}

std::optional<double> GgufFile::GetFloat(const std::string& key) const {
  const auto* v = Find(key);
  return v ? v->AsFloat() : std::nullopt;
}

std::optional<bool> GgufFile::GetBool(const std::string& key) const {
  const auto* v = Find(key);
  if (!v || v->type != GgufType::kBool) return std::nullopt;
  return v->u != 0;
}

}  // namespace infera
