#include "kv_offload/disk_tier.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

namespace infera::kv_offload {
namespace {

constexpr const char* kSuffix = ".kvb";
constexpr const char* kTmpPrefix = ".tmp-";

// Keys are infera's own ("infera:kv:..."): letters, digits, ':', '_', '-'.
bool SafeKey(const std::string& key) {
  if (key.empty() || key.size() > 200) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == ':' || c == '_' ||
           c == '-';
  });
}

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      if (e == ENOSPC || e == EDQUOT) return ResourceExhausted(fmt::format("{}: disk full", path));
      return Unavailable(fmt::format("{}: {}", path, std::strerror(e)));
    }
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// The file mapped read-only (pages populated at once from the page cache);
// `missing` when there is no such file.
StatusOr<Blob> MapFile(const std::string& path, bool* missing) {
  *missing = false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      *missing = true;
      return Blob{};
    }
    return Unavailable(fmt::format("{}: {}", path, std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return Unavailable(fmt::format("{}: {}", path, std::strerror(e)));
  }
  const size_t n = static_cast<size_t>(st.st_size);
  if (n == 0) {
    ::close(fd);
    return Blob::Of(std::string());  // an empty file: a damaged blob, rejected by its reader
  }
  void* p = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) return Unavailable(fmt::format("{}: mmap: {}", path, std::strerror(e)));
  std::shared_ptr<const void> owner(p, [n](const void* q) { ::munmap(const_cast<void*>(q), n); });
  return Blob{std::string_view(static_cast<const char*>(p), n), std::move(owner)};
}

}  // namespace

StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(const std::string& dir, uint64_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec)) return InvalidArgument(fmt::format("--kv-offload-dir {}: not a directory", dir));
  if (::access(dir.c_str(), W_OK | R_OK | X_OK) != 0) {
    return InvalidArgument(fmt::format("--kv-offload-dir {}: not writable", dir));
  }
  std::unique_ptr<DiskTier> t(new DiskTier(dir, max_bytes));
  struct Found {
    std::string key;
    uint64_t bytes;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kTmpPrefix, 0) == 0) {  // an interrupted write
      fs::remove(e.path(), ec);
      continue;
    }
    if (name.size() <= 4 || name.substr(name.size() - 4) != kSuffix || !e.is_regular_file(ec)) continue;
    std::string key = name.substr(0, name.size() - 4);
    std::replace(key.begin(), key.end(), '_', ':');
    if (!SafeKey(key)) continue;
    found.push_back({key, static_cast<uint64_t>(e.file_size(ec)), e.last_write_time(ec)});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  std::lock_guard<std::mutex> lock(t->mu_);
  for (const Found& f : found) {
    t->index_[f.key] = Entry{f.bytes, t->lru_.insert(t->lru_.end(), f.key)};
    t->total_ += f.bytes;
  }
  t->EvictLocked();
  return t;
}

std::string DiskTier::PathOf(const std::string& key) const {
  std::string name = key;
  std::replace(name.begin(), name.end(), ':', '_');
  return dir_ + "/" + name + kSuffix;
}

bool DiskTier::ForgetLocked(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  total_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
  return true;
}

void DiskTier::RemoveLocked(const std::string& key) {
  if (ForgetLocked(key)) ::unlink(PathOf(key).c_str());
}

void DiskTier::EvictLocked() {
  if (total_ <= max_bytes_) return;
  const int64_t now = static_cast<int64_t>(::time(nullptr));
  // Unpinned (or expired) files first, least recently used first.
  for (auto it = lru_.begin(); it != lru_.end() && total_ > max_bytes_;) {
    const std::string key = *it++;
    if (index_.at(key).pinned_until <= now) RemoveLocked(key);
  }
  while (total_ > max_bytes_ && !lru_.empty()) RemoveLocked(lru_.front());
}

Status DiskTier::Put(const std::vector<std::pair<std::string, std::string>>& items, int64_t /*ttl_seconds*/) {
  for (const auto& [key, value] : items) {
    if (!SafeKey(key)) return InvalidArgument(fmt::format("bad tier key '{}'", key));
    if (value.size() > max_bytes_) continue;  // could never fit
    std::string tmp;
    {
      std::lock_guard<std::mutex> lock(mu_);
      tmp = fmt::format("{}/{}{}-{}", dir_, kTmpPrefix, ::getpid(), tmp_counter_++);
    }
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (errno == ENOSPC || errno == EDQUOT) return ResourceExhausted(fmt::format("{}: disk full", dir_));
      return Unavailable(fmt::format("{}: {}", tmp, std::strerror(errno)));
    }
    Status st = WriteAll(fd, value, tmp);
    ::close(fd);
    const std::string path = PathOf(key);
    if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
      st = Unavailable(fmt::format("{}: {}", path, std::strerror(errno)));
    }
    if (!st.ok()) {
      ::unlink(tmp.c_str());
      return st;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ForgetLocked(key);  // replaced by the rename
    index_[key] = Entry{value.size(), lru_.insert(lru_.end(), key)};
    total_ += value.size();
    EvictLocked();
  }
  return Status::Ok();
}

StatusOr<std::vector<Blob>> DiskTier::Get(const std::vector<std::string>& keys) {
  std::vector<Blob> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = index_.find(keys[i]);
      if (it == index_.end()) continue;
      lru_.splice(lru_.end(), lru_, it->second.lru);
    }
    bool missing = false;
    auto data = MapFile(PathOf(keys[i]), &missing);
    if (!data.ok()) return data.status();
    if (missing) {  // removed behind our back
      std::lock_guard<std::mutex> lock(mu_);
      ForgetLocked(keys[i]);
      continue;
    }
    out[i] = std::move(*data);
  }
  return out;
}

Status DiskTier::Touch(const std::vector<std::string>& keys, int64_t ttl_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t until = ttl_seconds > 0 ? static_cast<int64_t>(::time(nullptr)) + ttl_seconds : 0;
  for (const std::string& k : keys) {
    auto it = index_.find(k);
    if (it == index_.end()) continue;
    it->second.pinned_until = std::max(it->second.pinned_until, until);
    lru_.splice(lru_.end(), lru_, it->second.lru);
    ::utimensat(AT_FDCWD, PathOf(k).c_str(), nullptr, 0);  // the order survives a restart
  }
  return Status::Ok();
}

Status DiskTier::Delete(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& k : keys) RemoveLocked(k);
  return Status::Ok();
}

uint64_t DiskTier::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

size_t DiskTier::num_files() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.size();
}

}  // namespace infera::kv_offload
