#include "quant/imatrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/file_util.h"
#include "base/output_file.h"
#include "formats/gguf_reader.h"
#include "formats/gguf_writer.h"

namespace infera {
namespace {

constexpr const char* kSum2Suffix = ".in_sum2";
constexpr const char* kCountsSuffix = ".counts";

bool StripSuffix(std::string* s, const std::string& suffix) {
  if (s->size() <= suffix.size() || !s->ends_with(suffix)) return false;
  s->resize(s->size() - suffix.size());
  return true;
}

// Little-endian reads from a byte string with bounds checks.
class LegacyCursor {
 public:
  explicit LegacyCursor(const std::string& b) : b_(b) {}
  bool I32(int32_t* v) { return Bytes(v, 4); }
  bool Bytes(void* dst, size_t n) {
    if (n > b_.size() - pos_) return false;
    std::memcpy(dst, b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t left() const { return b_.size() - pos_; }

 private:
  const std::string& b_;
  size_t pos_ = 0;
};

}  // namespace

StatusOr<Imatrix> Imatrix::FromGguf(const GgufFile& file, const std::string& path) {
  const GgufFile* f = &file;
  Imatrix im;
  if (const GgufValue* v = f->Find("imatrix.datasets"); v && v->type == GgufType::kArray) im.datasets = v->arr_s;
  if (const GgufValue* v = f->Find("imatrix.chunk_count"); v && v->AsInt()) {
    im.chunk_count = static_cast<uint32_t>(*v->AsInt());
  }
  if (const GgufValue* v = f->Find("imatrix.chunk_size"); v && v->AsInt()) {
    im.chunk_size = static_cast<uint32_t>(*v->AsInt());
  }
  std::map<std::string, std::pair<const TensorView*, const TensorView*>> parts;
  for (const TensorView& t : f->tensors()) {
    std::string name = t.name;
    if (StripSuffix(&name, kSum2Suffix)) parts[name].first = &t;
    else if (StripSuffix(&name, kCountsSuffix)) parts[name].second = &t;
    // Other tensors (llama.cpp's newer .in_sum) are not needed here.
  }
  for (const auto& [name, p] : parts) {
    const auto [sums, counts] = p;
    if (sums == nullptr || counts == nullptr) {
      return InvalidArgument(path + ": imatrix entry " + name + " lacks its " + (sums ? "counts" : "in_sum2") +
                             " tensor");
    }
    if (sums->type != DType::kF32 || counts->type != DType::kF32 || sums->ne.empty() || sums->ne.size() > 2 ||
        counts->NumElements() != (sums->ne.size() == 2 ? sums->ne[1] : 1) || sums->ne[0] <= 0) {
      return InvalidArgument(path + ": imatrix entry " + name + " has tensors of unexpected type or shape (" +
                             sums->ShapeString() + ", counts " + counts->ShapeString() + ")");
    }
    ImatrixEntry e;
    e.width = sums->ne[0];
    const auto* s = reinterpret_cast<const float*>(sums->data);
    const auto* c = reinterpret_cast<const float*>(counts->data);
    e.sum2.assign(s, s + sums->NumElements());
    e.counts.assign(c, c + counts->NumElements());
    for (double v : e.counts) {
      if (!(v >= 0) || !std::isfinite(v)) return InvalidArgument(path + ": imatrix entry " + name + " has a bad count");
    }
    im.entries.emplace(name, std::move(e));
  }
  if (im.entries.empty()) return InvalidArgument(path + ": the GGUF file holds no imatrix entries");
  return im;
}

Status Imatrix::Add(const std::string& name, int64_t n_mat, int64_t mat, const float* x, int64_t rows, int64_t width) {
  ImatrixEntry& e = entries[name];
  if (e.counts.empty()) {
    e.width = width;
    e.sum2.assign(static_cast<size_t>(n_mat * width), 0.0);
    e.counts.assign(static_cast<size_t>(n_mat), 0.0);
  } else if (e.width != width || e.n_mat() != n_mat) {
    return Internal("imatrix entry " + name + ": inconsistent shape");
  }
  double* s = e.sum2.data() + mat * width;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * width;
    for (int64_t j = 0; j < width; ++j) s[j] += static_cast<double>(xr[j]) * xr[j];
  }
  e.counts[mat] += static_cast<double>(rows);
  return Status::Ok();
}

std::vector<float> Imatrix::Importance(const std::string& name) const {
  auto it = entries.find(name);
  if (it == entries.end()) return {};
  const ImatrixEntry& e = it->second;
  std::vector<float> out(e.sum2.size());
  for (int64_t m = 0; m < e.n_mat(); ++m) {
    const double c = e.counts[m];
    for (int64_t j = 0; j < e.width; ++j) {
      const size_t i = static_cast<size_t>(m * e.width + j);
      out[i] = c > 0 ? static_cast<float>(e.sum2[i] / c) : 1.0f;
    }
  }
  return out;
}

StatusOr<Imatrix> Imatrix::ParseLegacy(const std::string& bytes, const std::string& name) {
  LegacyCursor in(bytes);
  int32_t n_entries = 0;
  if (!in.I32(&n_entries) || n_entries < 1) return InvalidArgument(name + ": not an imatrix file (no entries)");
  Imatrix im;
  for (int32_t i = 0; i < n_entries; ++i) {
    int32_t len = 0, ncall = 0, nval = 0;
    if (!in.I32(&len) || len <= 0 || static_cast<size_t>(len) > in.left()) {
      return InvalidArgument(name + ": truncated or corrupt imatrix entry " + std::to_string(i));
    }
    std::string tname(static_cast<size_t>(len), '\0');
    in.Bytes(tname.data(), tname.size());
    if (!in.I32(&ncall) || !in.I32(&nval) || nval <= 0 || static_cast<uint64_t>(nval) * 4 > in.left()) {
      return InvalidArgument(name + ": truncated or corrupt imatrix entry " + tname);
    }
    std::vector<float> v(static_cast<size_t>(nval));
    in.Bytes(v.data(), v.size() * 4);
    ImatrixEntry e;
    e.width = nval;  // legacy files hold one matrix per entry
    e.sum2.assign(v.begin(), v.end());
    // Values are mean x^2 times ncall: a count of ncall gives the means back.
    e.counts.assign(1, ncall > 0 ? static_cast<double>(ncall) : 1.0);
    if (!im.entries.emplace(tname, std::move(e)).second) {
      return InvalidArgument(name + ": imatrix entry " + tname + " appears twice");
    }
  }
  int32_t chunks = 0, len = 0;
  if (in.I32(&chunks)) {
    im.chunk_count = static_cast<uint32_t>(std::max(0, chunks));
    if (in.I32(&len) && len > 0 && static_cast<size_t>(len) <= in.left()) {
      std::string ds(static_cast<size_t>(len), '\0');
      in.Bytes(ds.data(), ds.size());
      im.datasets.push_back(std::move(ds));
    }
  }
  return im;
}

StatusOr<Imatrix> Imatrix::Load(const std::string& path) {
  auto bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  if (bytes->size() >= 4 && bytes->compare(0, 4, "GGUF") == 0) {
    auto f = GgufFile::Open(path);
    if (!f.ok()) return f.status();
    return FromGguf(**f, path);
  }
  return ParseLegacy(*bytes, path);
}

Status Imatrix::Save(const std::string& path, bool legacy) const {
  if (!legacy) {
    GgufWriter w;
    w.SetString("general.type", "imatrix");
    w.SetStringArray("imatrix.datasets", datasets);
    w.SetU32("imatrix.chunk_count", chunk_count);
    w.SetU32("imatrix.chunk_size", chunk_size);
    for (const auto& [name, e] : entries) {
      std::vector<uint8_t> s(e.sum2.size() * 4), c(e.counts.size() * 4);
      for (size_t i = 0; i < e.sum2.size(); ++i) {
        const float v = static_cast<float>(e.sum2[i]);
        std::memcpy(s.data() + 4 * i, &v, 4);
      }
      for (size_t i = 0; i < e.counts.size(); ++i) {
        const float v = static_cast<float>(e.counts[i]);
        std::memcpy(c.data() + 4 * i, &v, 4);
      }
      w.AddTensorCopy(name + kSum2Suffix, DType::kF32, {e.width, e.n_mat()}, std::move(s));
      w.AddTensorCopy(name + kCountsSuffix, DType::kF32, {1, e.n_mat()}, std::move(c));
    }
    return w.Write(path);
  }
  std::string out;
  auto put_i32 = [&](int32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  const double chunk = std::max<uint32_t>(1, chunk_size);
  int32_t n = 0;
  for (const auto& [name, e] : entries) n += std::any_of(e.counts.begin(), e.counts.end(), [](double c) { return c > 0; });
  put_i32(n);
  for (const auto& [name, e] : entries) {
    const double max_count = *std::max_element(e.counts.begin(), e.counts.end());
    if (max_count <= 0) continue;  // no data: llama-imatrix skips it too
    put_i32(static_cast<int32_t>(name.size()));
    out += name;
    const int32_t ncall = static_cast<int32_t>(std::ceil(max_count / chunk));
    put_i32(ncall);
    put_i32(static_cast<int32_t>(e.sum2.size()));
    for (int64_t m = 0; m < e.n_mat(); ++m) {
      for (int64_t j = 0; j < e.width; ++j) {
        double count = e.counts[m], value = e.sum2[m * e.width + j];
        if (count == 0) value = count = 1;  // partial data: stored as 1
        const float f = static_cast<float>(value / count * ncall);
        out.append(reinterpret_cast<const char*>(&f), 4);
      }
    }
  }
  put_i32(static_cast<int32_t>(chunk_count));
  const std::string ds = datasets.empty() ? std::string() : datasets.back();
  put_i32(static_cast<int32_t>(ds.size()));
  out += ds;
  return WriteFileAtomically(path, out);
}

}  // namespace infera
