#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "base/json.h"

namespace infera {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Returns false for dtypes infera cannot hold at all; unsupported-but-known
// ones map to the nearest GGUF type and are refused later by the loader.
bool MapDType(const std::string& s, DType* out, int* elem_bytes) {
  if (s == "F32") { *out = DType::kF32; *elem_bytes = 4; return true; }
  if (s == "F16") { *out = DType::kF16; *elem_bytes = 2; return true; }
  if (s == "BF16") { *out = DType::kBF16; *elem_bytes = 2; return true; }
  if (s == "F64") { *out = DType::kF64; *elem_bytes = 8; return true; }
  if (s == "I64") { *out = DType::kI64; *elem_bytes = 8; return true; }
  if (s == "I32") { *out = DType::kI32; *elem_bytes = 4; return true; }
  if (s == "I16") { *out = DType::kI16; *elem_bytes = 2; return true; }
  if (s == "I8") { *out = DType::kI8; *elem_bytes = 1; return true; }
  return false;
}

}  // namespace

Status SafetensorsSet::AddFile(const uint8_t* data, size_t size, const std::string& name) {
  auto err = [&](const std::string& what) { return DataLoss(name + ": invalid safetensors: " + what); };
  if (size < 8) return err("file shorter than its 8-byte header length");
  uint64_t n;
  std::memcpy(&n, data, 8);
  if (n > kMaxHeaderBytes || n > size - 8) return err(fmt::format("header length {} exceeds the file", n));
  const char* hb = reinterpret_cast<const char*>(data + 8);
  nlohmann::json header = ParseJson(std::string_view(hb, n));
  if (header.is_discarded() || !header.is_object()) return err("header is not a JSON object");
  const uint8_t* base = data + 8 + n;
  const uint64_t data_size = size - 8 - n;

  struct Range { uint64_t b, e; std::string name; };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& e = it.value();
    if (!e.is_object()) return err("entry '" + it.key() + "' is not an object");
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto off = e.find("data_offsets");
    if (dt == e.end() || !dt->is_string()) return err("tensor '" + it.key() + "' has no dtype");
    if (sh == e.end() || !sh->is_array()) return err("tensor '" + it.key() + "' has no shape");
    if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      return err("tensor '" + it.key() + "' has bad data_offsets");
    }
    TensorView tv;
    tv.name = it.key();
    int elem_bytes = 0;
    if (!MapDType(dt->get<std::string>(), &tv.type, &elem_bytes)) {
      return Unimplemented(name + ": tensor '" + tv.name + "' has unsupported dtype " + dt->get<std::string>());
    }
    if (sh->size() > 4) return err("tensor '" + tv.name + "' has more than 4 dims");
    uint64_t count = 1;
    for (auto d = sh->rbegin(); d != sh->rend(); ++d) {
      if (!d->is_number_unsigned()) return err("tensor '" + tv.name + "' has a bad dim");
      uint64_t v = d->get<uint64_t>();
      if (v == 0 || v > (uint64_t{1} << 40) || count > (uint64_t{1} << 52) / v) {
        return err("tensor '" + tv.name + "' has an invalid shape");
      }
      count *= v;
      tv.ne.push_back(static_cast<int64_t>(v));
    }
    if (tv.ne.empty()) tv.ne.push_back(1);  // scalar
    uint64_t b = (*off)[0].get<uint64_t>(), e2 = (*off)[1].get<uint64_t>();
    if (b > e2 || e2 > data_size) return err(fmt::format("tensor '{}' data [{}, {}) lies outside the data section ({} bytes; truncated file?)", tv.name, b, e2, data_size));
    if (e2 - b != count * static_cast<uint64_t>(elem_bytes)) {
      return err(fmt::format("tensor '{}' has {} bytes but its shape needs {}", tv.name, e2 - b, count * elem_bytes));
    }
    tv.data = base + b;
    tv.nbytes = e2 - b;
    if (tensors_.count(tv.name)) return err("duplicate tensor '" + tv.name + "'");
    ranges.push_back({b, e2, tv.name});
    total_bytes_ += tv.nbytes;
    tensors_.emplace(tv.name, std::move(tv));
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.b < b.b; });
  for (size_t k = 1; k < ranges.size(); ++k) {
    if (ranges[k].b < ranges[k - 1].e) return err("tensors '" + ranges[k - 1].name + "' and '" + ranges[k].name + "' overlap");
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<SafetensorsSet>> SafetensorsSet::Parse(const uint8_t* data, size_t size,
                                                                 const std::string& name) {
  std::unique_ptr<SafetensorsSet> s(new SafetensorsSet());
  RETURN_IF_ERROR(s->AddFile(data, size, name));
  return s;
}

StatusOr<std::unique_ptr<SafetensorsSet>> SafetensorsSet::OpenFile(const std::string& path) {
  std::unique_ptr<SafetensorsSet> s(new SafetensorsSet());
  ASSIGN_OR_RETURN(auto map, MappedFile::Open(path));
  RETURN_IF_ERROR(s->AddFile(map->data(), map->size(), path));
  s->maps_.push_back(std::move(map));
  return s;
}

StatusOr<std::unique_ptr<SafetensorsSet>> SafetensorsSet::OpenDir(const std::string& dir) {
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  if (FileExists(single)) return OpenFile(single);
  if (!FileExists(index)) return NotFound(dir + ": no model.safetensors or model.safetensors.index.json");
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(index));
  auto j = ParseJson(text);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    return DataLoss(index + ": not a valid safetensors index (no weight_map)");
  }
  std::set<std::string> shards;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) return DataLoss(index + ": weight_map values must be file names");
    std::string f = it.value().get<std::string>();
    if (f.find('/') != std::string::npos || f.find("..") != std::string::npos) {
      return DataLoss(index + ": shard name '" + f + "' must be a plain file name");
    }
    shards.insert(f);
  }
  std::unique_ptr<SafetensorsSet> s(new SafetensorsSet());
  for (const auto& f : shards) {
    ASSIGN_OR_RETURN(auto map, MappedFile::Open(dir + "/" + f));
    RETURN_IF_ERROR(s->AddFile(map->data(), map->size(), dir + "/" + f));
    s->maps_.push_back(std::move(map));
  }
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!s->tensors_.count(it.key())) {
      return DataLoss(index + ": tensor '" + it.key() + "' is not in its shard");
    }
  }
  return s;
}

const TensorView* SafetensorsSet::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace infera
