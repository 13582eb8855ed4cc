#include "engine/kv_offloader.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "base/check.h"
#include "base/logging.h"
#include "kernels/kernels.h"
#include "kv_offload/block_blob.h"

namespace infera {

StatusOr<uint64_t> HashModelFiles(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_regular_file(path, ec)) {
    files.push_back(path);
  } else if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::recursive_directory_iterator(path, ec)) {
      if (e.is_regular_file(ec)) files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
  } else {
    return uint64_t{0};
  }
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(1 << 20);
  for (const std::string& f : files) {
    const std::string rel = f.substr(std::min(f.size(), path.size()));
    XXH3_64bits_update(st, rel.data(), rel.size());
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      XXH3_freeState(st);
      return Unavailable(fmt::format("{}: cannot read to fingerprint the model", f));
    }
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      XXH3_64bits_update(st, buf.data(), static_cast<size_t>(in.gcount()));
    }
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

StatusOr<std::unique_ptr<KvOffloader>> KvOffloader::Create(const Model& model, KvType kv_type, int32_t block_size,
                                                           int32_t max_model_len, const KvOffloadOptions& o,
                                                           const KernelTable& kernels) {
  if (model.shard.split()) return InvalidArgument("--kv-offload-* works with a whole model only (not with --tp/--pp)");
  uint32_t kind;
  if (o.type == "auto") kind = kv_type == KvType::kQ8 ? kKvPayloadQ8 : kKvPayloadF32;  // bf16: exact in f32
  else if (o.type == "f32") kind = kKvPayloadF32;
  else if (o.type == "q8") kind = kKvPayloadQ8;
  else return InvalidArgument("--kv-offload-type must be auto, f32 or q8");
  if (kind == kKvPayloadF32 && kv_type == KvType::kQ8) {
    return InvalidArgument("--kv-offload-type f32 with --kv-cache-type q8: the cache holds int8 already");
  }
  if (o.timeout_ms < 1) return InvalidArgument("--kv-offload-timeout-ms must be at least 1");
  if (o.ttl_seconds < 0) return InvalidArgument("--kv-offload-ttl must be >= 0");
  if (!(o.dir_gb > 0)) return InvalidArgument("--kv-offload-dir-gb must be > 0");
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(uint64_t weights, HashModelFiles(model.path));
  const ModelConfig& c = model.config;
  std::string desc = fmt::format("weights={:016x} arch={} name={} vocab={} embd={} layers={} head_dim={} kv_heads=[{}] "
                                 "rope_theta={} rope_dim={} rope_style={} scaling={} factor={} orig={} ctx_long={} "
                                 "kv={} payload={} block={}",
                                 weights, static_cast<int>(c.arch), c.name, c.n_vocab, c.n_embd, c.n_layer, c.head_dim,
                                 fmt::join(c.KvHeadsPerLayer(), ","), c.rope_theta, c.rope_dim,
                                 static_cast<int>(c.rope_style), static_cast<int>(c.rope_scaling.type),
                                 c.rope_scaling.factor, c.rope_scaling.original_max_position,
                                 max_model_len > c.rope_scaling.original_max_position ? 1 : 0,
                                 KvTypeName(kv_type), kind, block_size);
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerConfig lc = c.Layer(l);
    desc += fmt::format(" L{}:{}/{}/{}", l, lc.rope_theta, lc.rope_linear_factor, lc.sliding_window);
  }
  // (f32 products add nothing: the fingerprint of earlier versions)
  if (kernels.attn_bf16) desc += " attn=bf16";
  if (kernels.matmul_bf16) desc += " matmul=bf16";
  const uint64_t fp = kv_offload::Hash64(desc);
  kv_offload::OffloadConfig cfg;
  cfg.dir = o.dir;
  cfg.dir_max_bytes = static_cast<uint64_t>(o.dir_gb * (1ull << 30));
  cfg.redis_url = o.redis_url;
  cfg.ttl_seconds = o.ttl_seconds;
  cfg.timeout_ms = o.timeout_ms;
  cfg.max_queue_bytes = static_cast<uint64_t>(std::max<int64_t>(1, o.max_queue_mb)) << 20;
  ASSIGN_OR_RETURN(std::unique_ptr<kv_offload::OffloadStore> store, kv_offload::OffloadStore::Create(cfg));
  LOG_INFO("kv offload: model fingerprint {:016x} (weights hashed in {:.2f} s), {} payload", fp,
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
           kind == kKvPayloadF32 ? "f32" : "q8");
  return std::unique_ptr<KvOffloader>(new KvOffloader(std::move(store), fp, kind, block_size));
}

std::vector<std::string> KvOffloader::KeysOf(const std::vector<uint64_t>& chain) const {
  std::vector<std::string> keys;
  keys.reserve(chain.size());
  for (uint64_t k : chain) keys.push_back(kv_offload::BlockKey(fingerprint_, k));
  return keys;
}

void KvOffloader::EnqueueBlock(KvStorage& kv, int32_t block, uint64_t chain_key, const int32_t* tokens,
                               std::string key) {
  const std::string payload = EncodeKvBlock(kv, block * block_size_, block_size_, kind_);
  store_->Enqueue(std::move(key),
                  kv_offload::EncodeBlockBlob({fingerprint_, chain_key, kind_}, tokens, block_size_, payload));
}

void KvOffloader::WriteThrough(BlockManager& blocks, KvStorage& kv) {
  for (const BlockManager::Committed& c : blocks.TakeCommitted()) {
    std::string key = kv_offload::BlockKey(fingerprint_, c.key);
    if (store_->Known(key)) continue;
    EnqueueBlock(kv, c.block, c.key, blocks.pool().TokensOf(c.block).data(), std::move(key));
  }
}

bool KvOffloader::StartFetch(uint64_t id, const std::vector<int32_t>& tokens, int32_t max_cached,
                             const BlockManager& blocks) {
  const int32_t n_full = std::max(0, std::min<int32_t>(max_cached, static_cast<int32_t>(tokens.size()))) / block_size_;
  if (n_full == 0) return false;
  Pending p;
  p.tokens.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n_full) * block_size_);
  p.chain = BlockManager::ChainKeys(p.tokens, n_full, block_size_);
  p.first = blocks.CachedBlocks(p.chain, p.tokens);
  if (p.first == n_full) return false;
  std::vector<uint64_t> rest(p.chain.begin() + p.first, p.chain.end());
  store_->Fetch(id, KeysOf(rest));
  pending_[id] = std::move(p);
  return true;
}

std::vector<KvOffloader::Ready> KvOffloader::Install(BlockManager& blocks, KvStorage& kv,
                                                     std::chrono::milliseconds wait, int32_t reserve) {
  std::vector<Ready> out;
  if (pending_.empty()) return out;
  for (kv_offload::FetchResult& r : store_->TakeFetched(wait)) {
    auto it = pending_.find(r.ticket);
    if (it == pending_.end()) continue;  // cancelled meanwhile
    Pending& p = it->second;
    Ready ready;
    ready.id = r.ticket;
    // Pin the RAM part of the chain first: loading may evict cached blocks.
    int32_t blk = 0;
    for (; blk < p.first; ++blk) {
      auto b = blocks.PinCached(p.chain[blk], p.tokens.data() + static_cast<size_t>(blk) * block_size_);
      if (!b) break;  // evicted meanwhile: the chain ends here
      ready.pinned.push_back(*b);
    }
    const bool ram_intact = blk == p.first;
    for (size_t i = 0; ram_intact && i < r.values.size(); ++i) {
      blk = p.first + static_cast<int32_t>(i);
      const int32_t* toks = p.tokens.data() + static_cast<size_t>(blk) * block_size_;
      uint32_t kind = 0;
      auto payload = kv_offload::DecodeBlockBlob(r.values[i].bytes, fingerprint_, p.chain[blk], toks, block_size_, &kind);
      if (payload.ok() && payload->size() != KvPayloadBytes(kv, block_size_, kind)) {
        payload = DataLoss("KV payload size mismatch");
      }
      const std::string key = kv_offload::BlockKey(fingerprint_, p.chain[blk]);
      if (!payload.ok()) {
        ++load_rejected_;
        store_->ReportCorrupt(r.tier_of[i], key);
        break;
      }
      if (auto b = blocks.PinCached(p.chain[blk], toks)) {  // computed meanwhile
        ready.pinned.push_back(*b);
        continue;
      }
      if (blocks.num_free_blocks() <= reserve) break;
      auto b = blocks.AdoptBlock(p.chain[blk], toks);
      if (!b) break;
      Status st = DecodeKvBlock(*payload, kind, kv, *b * block_size_, block_size_);
      CHECK(st.ok());  // sizes and kinds were checked above
      ready.pinned.push_back(*b);
      store_->MarkKnown(key);
      ++loaded_blocks_;
    }
    pending_.erase(it);
    out.push_back(std::move(ready));
  }
  return out;
}

namespace {
constexpr uint32_t kSessionRecordKind = 3;
}  // namespace

std::string KvOffloader::SessionKey(const std::string& id) const {
  return fmt::format("infera:session:{:016x}:{:016x}", fingerprint_, kv_offload::Hash64(id));
}

// A session record: the id, a NUL, then the tokens (int32), as a blob of
// block size 0 under the id's hash.
std::string KvOffloader::SessionRecord(const std::string& id, const std::vector<int32_t>& tokens) const {
  std::string payload = id;
  payload.push_back('\0');
  payload.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(int32_t));
  const int32_t none = 0;
  return kv_offload::EncodeBlockBlob({fingerprint_, kv_offload::Hash64(id), kSessionRecordKind}, &none, 0, payload);
}

std::vector<std::string> KvOffloader::BlockKeysOf(const std::vector<int32_t>& tokens) const {
  const int32_t n = static_cast<int32_t>(tokens.size()) / block_size_;
  return KeysOf(BlockManager::ChainKeys(tokens, n, block_size_));
}

void KvOffloader::PinSession(const std::string& id, const std::vector<int32_t>& tokens, int64_t ttl_seconds) {
  store_->Enqueue(SessionKey(id), SessionRecord(id, tokens));
  store_->EnqueueTouch(BlockKeysOf(tokens), ttl_seconds);
}

StatusOr<std::vector<int32_t>> KvOffloader::SessionTokens(const std::string& id) {
  ASSIGN_OR_RETURN(std::string blob, store_->GetSync(SessionKey(id)));
  if (blob.empty()) return NotFound(fmt::format("no session '{}' in the KV offload tiers", id));
  const int32_t none = 0;
  uint32_t kind = 0;
  ASSIGN_OR_RETURN(std::string_view payload,
                   kv_offload::DecodeBlockBlob(blob, fingerprint_, kv_offload::Hash64(id), &none, 0, &kind));
  if (kind != kSessionRecordKind || payload.size() < id.size() + 1 || payload.substr(0, id.size()) != id ||
      payload[id.size()] != '\0' || (payload.size() - id.size() - 1) % sizeof(int32_t) != 0) {
    return DataLoss(fmt::format("session '{}': damaged record", id));
  }
  std::vector<int32_t> tokens((payload.size() - id.size() - 1) / sizeof(int32_t));
  std::memcpy(tokens.data(), payload.data() + id.size() + 1, tokens.size() * sizeof(int32_t));
  return tokens;
}

std::pair<int64_t, int64_t> KvOffloader::SaveSession(const std::string& id, const std::vector<int32_t>& tokens,
                                                     int64_t ttl_seconds, BlockManager& blocks, KvStorage& kv,
                                                     std::chrono::milliseconds wait) {
  const int32_t n = static_cast<int32_t>(tokens.size()) / block_size_;
  const std::vector<uint64_t> chain = BlockManager::ChainKeys(tokens, n, block_size_);
  int64_t written = 0;
  for (int32_t blk = 0; blk < n; ++blk) {
    const int32_t* toks = tokens.data() + static_cast<size_t>(blk) * block_size_;
    auto b = blocks.PinCached(chain[blk], toks);
    if (!b) continue;  // not in RAM: in the tiers already, or gone
    EnqueueBlock(kv, *b, chain[blk], toks, kv_offload::BlockKey(fingerprint_, chain[blk]));
    blocks.Unpin(*b);
    ++written;
  }
  PinSession(id, tokens, ttl_seconds);
  store_->Flush(wait);
  return {n, written};
}

Status KvOffloader::DeleteSession(const std::string& id, const std::vector<int32_t>& tokens) {
  std::vector<std::string> keys = BlockKeysOf(tokens);
  keys.push_back(SessionKey(id));
  store_->Flush(std::chrono::seconds(2));  // nothing of it written after the delete
  return store_->Delete(keys);
}

kv_offload::OffloadCounters KvOffloader::Counters() const { return store_->Counters(); }

}  // namespace infera
