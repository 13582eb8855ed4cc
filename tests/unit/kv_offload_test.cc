// KV offload tiers: the stored block format rejects every damaged or foreign
// blob, the disk tier persists and evicts by size, the store backs off a
// failing tier and drops writes when its queue is full, and an engine
// resumes a prefix from the disk tier after a restart with the same output.
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include "attention/kv_storage.h"
#include "engine/kv_offloader.h"
#include "infera/engine.h"
#include "kernels/bf16_generic.h"
#include "kernels/kernels.h"
#include "kv_offload/block_blob.h"
#include "kv_offload/disk_tier.h"
#include "kv_offload/offload_store.h"
#include "kv_offload/redis_tier.h"
#include "model/loader.h"
#include "unit/test_util.h"

namespace infera::kv_offload_test {
namespace {

using kv_offload::BlockBlobHeader;
using kv_offload::DecodeBlockBlob;
using kv_offload::EncodeBlockBlob;

std::string FreshDir(const std::string& name) {
  const std::string d = testing::TempDir() + "/" + name;
  std::filesystem::remove_all(d);
  return d;
}

TEST(BlockBlob, RoundTripsAndRejectsEveryDamagedByte) {
  const int32_t bs = 4;
  const int32_t toks[bs] = {5, 6, 7, 8};
  const std::string payload = "0123456789abcdef";
  const std::string blob = EncodeBlockBlob(BlockBlobHeader{11, 22, 1}, toks, bs, payload);
  uint32_t kind = 0;
  auto ok = DecodeBlockBlob(blob, 11, 22, toks, bs, &kind);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, payload);
  EXPECT_EQ(kind, 1u);
  for (size_t i = 0; i < blob.size(); ++i) {
    std::string bad = blob;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    EXPECT_FALSE(DecodeBlockBlob(bad, 11, 22, toks, bs, &kind).ok()) << "byte " << i;
  }
  EXPECT_FALSE(DecodeBlockBlob(blob.substr(0, blob.size() - 1), 11, 22, toks, bs, &kind).ok());
  EXPECT_FALSE(DecodeBlockBlob(blob + "x", 11, 22, toks, bs, &kind).ok());
  EXPECT_FALSE(DecodeBlockBlob(blob, 12, 22, toks, bs, &kind).ok());  // another model
  EXPECT_FALSE(DecodeBlockBlob(blob, 11, 23, toks, bs, &kind).ok());  // another chain
  const int32_t other[bs] = {5, 6, 7, 9};
  EXPECT_FALSE(DecodeBlockBlob(blob, 11, 22, other, bs, &kind).ok());  // other tokens
  EXPECT_FALSE(DecodeBlockBlob("", 11, 22, toks, bs, &kind).ok());
}

TEST(DiskTier, PersistsAcrossReopenEvictsLeastRecentlyUsedAndCleansTemporaries) {
  const std::string dir = FreshDir("kv-disk-tier");
  {
    auto t = kv_offload::DiskTier::Open(dir, 250);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE((*t)->Put({{"infera:kv:a", std::string(100, 'a')}, {"infera:kv:b", std::string(100, 'b')}}, 0).ok());
    auto got = (*t)->Get({"infera:kv:a"});  // a is now the most recent
    ASSERT_TRUE(got.ok());
    ASSERT_TRUE((*t)->Put({{"infera:kv:c", std::string(100, 'c')}}, 0).ok());  // 300 > 250: b goes
    got = (*t)->Get({"infera:kv:a", "infera:kv:b", "infera:kv:c"});
    ASSERT_TRUE(got.ok());
    EXPECT_EQ((*got)[0].bytes, std::string(100, 'a'));
    EXPECT_TRUE((*got)[1].empty());
    EXPECT_EQ((*got)[2].bytes, std::string(100, 'c'));
    EXPECT_EQ((*t)->bytes(), 200u);
    EXPECT_FALSE((*t)->Put({{"../escape", "x"}}, 0).ok());
  }
  std::ofstream(dir + "/.tmp-123-0") << "half-written";
  auto t = kv_offload::DiskTier::Open(dir, 250);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->num_files(), 2u);
  EXPECT_FALSE(std::filesystem::exists(dir + "/.tmp-123-0"));
  auto got = (*t)->Get({"infera:kv:c"});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0].bytes, std::string(100, 'c'));
  ASSERT_TRUE((*t)->Delete({"infera:kv:c"}).ok());
  EXPECT_TRUE((*(*t)->Get({"infera:kv:c"}))[0].empty());
  EXPECT_FALSE(kv_offload::DiskTier::Open("/proc/version/x", 1).ok());
}

TEST(RedisUrl, Parses) {
  auto u = kv_offload::ParseRedisUrl("redis://10.0.0.2:6380/3");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "10.0.0.2");
  EXPECT_EQ(u->port, 6380);
  EXPECT_EQ(u->db, 3);
  u = kv_offload::ParseRedisUrl("redis://:secret@cache");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "cache");
  EXPECT_EQ(u->port, 6379);
  EXPECT_EQ(u->password, "secret");
  EXPECT_FALSE(kv_offload::ParseRedisUrl("http://x").ok());
  EXPECT_FALSE(kv_offload::ParseRedisUrl("redis://x:99999").ok());
  EXPECT_FALSE(kv_offload::ParseRedisUrl("redis://x:1/db").ok());
}

TEST(RedisTier, UnreachableServerFailsWithinTheTimeout) {
  kv_offload::RedisTier t(kv_offload::RedisUrl{"127.0.0.1", 1, 0, ""}, 200);
  EXPECT_FALSE(t.Get({"k"}).ok());
  EXPECT_FALSE(t.Put({{"k", "v"}}, 10).ok());
}

// K/V of one block survive encode -> decode: exactly for f32, int8 and bf16
// caches (bf16 in f32 payloads), within half a quantization step for f32 and
// bf16 caches stored as q8.
TEST(KvBlockCodec, RoundTrips) {
  const std::vector<int> heads = {2, 1};
  const int hd = 8;
  for (const int bs : {16, 12})  // whole 16-slot tiles (memcpy) and not
  for (KvType type : {KvType::kF32, KvType::kQ8, KvType::kBF16}) {
    KvStorage a(heads, 64, hd, type), b(heads, 64, hd, type);
    uint32_t seed = 1;
    auto rnd = [&] { return static_cast<float>((seed = seed * 1664525u + 1013904223u) >> 8) / (1 << 24) - 0.5f; };
    for (int l = 0; l < 2; ++l) {
      for (int h = 0; h < heads[l]; ++h) {
        for (int s = 0; s < 64; ++s) {
          for (int d = 0; d < hd; ++d) {
            if (type == KvType::kF32) {
              a.k(l, h)[FlashKIndex(s, d, hd)] = rnd();
              a.v(l, h)[s * hd + d] = rnd();
            } else if (type == KvType::kBF16) {
              a.k16(l, h)[FlashK16Index(s, d, hd)] = Bf16Round(rnd());
              a.v16(l, h)[FlashV16Index(s, d, hd)] = Bf16Round(rnd());
            } else {
              a.k8(l, h)[FlashKIndex(s, d, hd)] = static_cast<int8_t>(rnd() * 250);
              a.v8(l, h)[s * hd + d] = static_cast<int8_t>(rnd() * 250);
            }
          }
          if (type == KvType::kQ8) {
            a.k_scale(l, h)[s] = rnd() + 1;
            a.v_scale(l, h)[s] = rnd() + 1;
          }
        }
      }
    }
    const uint32_t kinds[] = {kKvPayloadF32, kKvPayloadQ8};
    for (uint32_t kind : kinds) {
      if (type == KvType::kQ8 && kind == kKvPayloadF32) continue;
      const std::string p = EncodeKvBlock(a, bs, bs, kind);
      ASSERT_EQ(p.size(), KvPayloadBytes(a, bs, kind));
      ASSERT_TRUE(DecodeKvBlock(p, kind, b, 2 * bs, bs).ok());
      EXPECT_FALSE(DecodeKvBlock(p.substr(1), kind, b, 2 * bs, bs).ok());
      for (int l = 0; l < 2; ++l) {
        for (int h = 0; h < heads[l]; ++h) {
          for (int i = 0; i < bs; ++i) {
            for (int d = 0; d < hd; ++d) {
              const int sa = bs + i, sb = 2 * bs + i;
              if (type == KvType::kBF16) {
                const float ka = Bf16ToF32(a.k16(l, h)[FlashK16Index(sa, d, hd)]);
                const float kb = Bf16ToF32(b.k16(l, h)[FlashK16Index(sb, d, hd)]);
                const float va = Bf16ToF32(a.v16(l, h)[FlashV16Index(sa, d, hd)]);
                const float vb = Bf16ToF32(b.v16(l, h)[FlashV16Index(sb, d, hd)]);
                if (kind == kKvPayloadF32) {  // exact
                  ASSERT_EQ(ka, kb);
                  ASSERT_EQ(va, vb);
                } else {  // int8 step plus bf16 rounding
                  ASSERT_NEAR(ka, kb, 0.5f / 127 * 0.51f + 2e-3f);
                  ASSERT_NEAR(va, vb, 0.5f / 127 * 0.51f + 2e-3f);
                }
              } else if (type == KvType::kQ8) {
                ASSERT_EQ(a.k8(l, h)[FlashKIndex(sa, d, hd)], b.k8(l, h)[FlashKIndex(sb, d, hd)]);
                ASSERT_EQ(a.v8(l, h)[sa * hd + d], b.v8(l, h)[sb * hd + d]);
              } else if (kind == kKvPayloadF32) {
                ASSERT_EQ(a.k(l, h)[FlashKIndex(sa, d, hd)], b.k(l, h)[FlashKIndex(sb, d, hd)]);
                ASSERT_EQ(a.v(l, h)[sa * hd + d], b.v(l, h)[sb * hd + d]);
              } else {
                ASSERT_NEAR(a.k(l, h)[FlashKIndex(sa, d, hd)], b.k(l, h)[FlashKIndex(sb, d, hd)], 0.5f / 127 * 0.51f);
                ASSERT_NEAR(a.v(l, h)[sa * hd + d], b.v(l, h)[sb * hd + d], 0.5f / 127 * 0.51f);
              }
            }
            if (type == KvType::kQ8) {
              ASSERT_EQ(a.k_scale(l, h)[bs + i], b.k_scale(l, h)[2 * bs + i]);
              ASSERT_EQ(a.v_scale(l, h)[bs + i], b.v_scale(l, h)[2 * bs + i]);
            }
          }
        }
      }
    }
  }
}

// A tier for the store's fault handling: fails on demand, or blocks its
// Puts until released.
class FakeTier : public kv_offload::KvTier {
 public:
  std::atomic<bool> fail{false}, block_puts{false};
  std::atomic<int> gets{0}, puts{0};
  std::map<std::string, std::string> data;
  std::mutex mu;
  const char* name() const override { return "fake"; }
  Status Put(const std::vector<std::pair<std::string, std::string>>& items, int64_t) override {
    while (block_puts) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++puts;
    if (fail) return Unavailable("fake failure");
    std::lock_guard<std::mutex> l(mu);
    for (const auto& [k, v] : items) data[k] = v;
    return Status::Ok();
  }
  StatusOr<std::vector<kv_offload::Blob>> Get(const std::vector<std::string>& keys) override {
    ++gets;
    if (fail) return Unavailable("fake failure");
    std::lock_guard<std::mutex> l(mu);
    std::vector<kv_offload::Blob> out;
    for (const auto& k : keys) out.push_back(data.count(k) ? kv_offload::Blob::Of(data[k]) : kv_offload::Blob{});
    return out;
  }
  Status Touch(const std::vector<std::string>&, int64_t) override { return Status::Ok(); }
  Status Delete(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> l(mu);
    for (const auto& k : keys) data.erase(k);
    return Status::Ok();
  }
};

kv_offload::FetchResult FetchOne(kv_offload::OffloadStore& s, std::vector<std::string> keys) {
  s.Fetch(7, std::move(keys));
  for (int i = 0; i < 1000; ++i) {
    auto r = s.TakeFetched(std::chrono::milliseconds(10));
    if (!r.empty()) return r[0];
  }
  ADD_FAILURE() << "fetch never finished";
  return {};
}

TEST(OffloadStore, LooksUpLeadingRunAndBacksOffAFailingTier) {
  auto owned = std::make_unique<FakeTier>();
  FakeTier* tier = owned.get();
  std::vector<std::unique_ptr<kv_offload::KvTier>> tiers;
  tiers.push_back(std::move(owned));
  kv_offload::OffloadStore store(std::move(tiers), kv_offload::OffloadConfig{});
  ASSERT_TRUE(store.Enqueue("k1", "v1"));
  ASSERT_TRUE(store.Enqueue("k3", "v3"));
  ASSERT_TRUE(store.Flush(std::chrono::seconds(10)));
  EXPECT_TRUE(store.Known("k1"));
  kv_offload::FetchResult r = FetchOne(store, {"k1", "k2", "k3"});
  ASSERT_EQ(r.values.size(), 1u);  // the chain ends at the first miss
  EXPECT_EQ(r.values[0].bytes, "v1");
  tier->fail = true;
  r = FetchOne(store, {"k1"});
  EXPECT_TRUE(r.values.empty());
  const int gets = tier->gets;
  tier->fail = false;
  r = FetchOne(store, {"k1"});  // backing off: not even asked
  EXPECT_TRUE(r.values.empty());
  EXPECT_EQ(tier->gets, gets);
  const kv_offload::OffloadCounters c = store.Counters();
  ASSERT_EQ(c.tiers.size(), 1u);
  EXPECT_EQ(c.tiers[0].errors, 1u);
  EXPECT_GE(c.tiers[0].skipped, 1u);
  EXPECT_FALSE(c.tiers[0].healthy);
  EXPECT_EQ(c.tiers[0].hits, 1u);
}

TEST(OffloadStore, DropsWritesWhenTheQueueIsFull) {
  auto owned = std::make_unique<FakeTier>();
  FakeTier* tier = owned.get();
  tier->block_puts = true;
  std::vector<std::unique_ptr<kv_offload::KvTier>> tiers;
  tiers.push_back(std::move(owned));
  kv_offload::OffloadConfig cfg;
  cfg.max_queue_bytes = 1000;
  kv_offload::OffloadStore store(std::move(tiers), cfg);
  int accepted = 0;
  for (int i = 0; i < 20; ++i) accepted += store.Enqueue(std::to_string(i), std::string(100, 'x')) ? 1 : 0;
  EXPECT_LE(accepted, 10 + 1);
  EXPECT_GE(store.Counters().dropped_writes, 9u);
  tier->block_puts = false;
  EXPECT_TRUE(store.Flush(std::chrono::seconds(10)));
}

// The engine: a prompt computed by one engine is served from the disk tier
// to a fresh engine (a restart) with identical greedy tokens; a damaged
// stored block is a miss (recomputed, same tokens), never wrong K/V.
struct EngineFixture {
  std::unique_ptr<Model> model;
  KernelTable kernels = MakeBestKernelTable();
  EngineFixture() {
    ModelConfig c = testing::TinyConfig();
    c.n_ctx_train = 2048;
    auto m = LoadModel(testing::WriteTinyModel(c, DType::kF32, 9, "kv-offload.gguf"));
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    model = std::move(m).value();
  }
  struct Result {
    std::vector<int32_t> tokens;
    int32_t cached = -1;
  };
  Result Run(const EngineOptions& base, const std::vector<int32_t>& prompt) {
    EngineOptions o = base;
    o.threads = 2;
    auto e = Engine::Create(*model, nullptr, kernels, o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    RequestParams p;
    p.sampling.temperature = 0;
    p.max_tokens = 12;
    p.ignore_eos = true;
    EXPECT_TRUE((*e)->Add(prompt, p).ok());
    Result r;
    while ((*e)->HasWork()) {
      for (const RequestOutput& out : (*e)->Step()) {
        EXPECT_NE(out.finish_reason, FinishReason::kError) << out.error;
        r.tokens.insert(r.tokens.end(), out.tokens.begin(), out.tokens.end());
        if (out.finished) r.cached = out.cached_tokens;
      }
    }
    const EngineStats s = (*e)->Stats();
    EXPECT_EQ(s.kv_blocks_used, 0);  // pins released, every block back
    return r;
  }
};

std::vector<int32_t> LongPrompt(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 53 + 7) % 300;
  return t;
}

TEST(KvOffloadEngine, ResumesFromDiskAfterRestartWithIdenticalTokens) {
  EngineFixture f;
  const std::vector<int32_t> prompt = LongPrompt(330);
  const EngineFixture::Result plain = f.Run(EngineOptions{}, prompt);
  EngineOptions o;
  o.kv_offload.dir = FreshDir("kv-engine-resume");
  const EngineFixture::Result first = f.Run(o, prompt);  // engine destroyed: queue drained
  EXPECT_EQ(first.cached, 0);
  EXPECT_EQ(first.tokens, plain.tokens);
  const EngineFixture::Result again = f.Run(o, prompt);
  EXPECT_EQ(again.cached, 320);  // every full block before the last token
  EXPECT_EQ(again.tokens, plain.tokens);

  // Damage one stored block's bytes: the chain is served up to it, the rest
  // recomputed; the tokens do not change.
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(o.kv_offload.dir)) files.push_back(e.path());
  ASSERT_GE(files.size(), 20u);
  for (const auto& file : files) {
    std::fstream fs(file, std::ios::in | std::ios::out | std::ios::binary);
    fs.seekp(200);
    fs.put('\x7f');
  }
  const EngineFixture::Result damaged = f.Run(o, prompt);
  EXPECT_EQ(damaged.cached, 0);
  EXPECT_EQ(damaged.tokens, plain.tokens);
  const EngineFixture::Result rewritten = f.Run(o, prompt);  // recomputed blocks were written again
  EXPECT_EQ(rewritten.cached, 320);
  EXPECT_EQ(rewritten.tokens, plain.tokens);

  // Another KV type is another fingerprint: a miss.
  EngineOptions q8 = o;
  q8.kv_cache_type = "q8";
  EXPECT_EQ(f.Run(q8, prompt).cached, 0);
  EXPECT_EQ(f.Run(q8, prompt).cached, 320);
  // So are other products (their K/V differ): bf16 matmuls, then bf16
  // attention, each a miss first and its own hit after.
  f.kernels.matmul_bf16 = true;
  EXPECT_EQ(f.Run(o, prompt).cached, 0);
  EXPECT_EQ(f.Run(o, prompt).cached, 320);
  f.kernels.matmul_bf16 = false;
  f.kernels.attn_bf16 = true;
  EXPECT_EQ(f.Run(o, prompt).cached, 0);
  f.kernels.attn_bf16 = false;
  EXPECT_EQ(f.Run(o, prompt).cached, 320);  // the f32 blocks are still there
}

TEST(KvOffloadEngine, RefillsAnEvictedPrefixFromDiskWithinOneEngine) {
  EngineFixture f;
  EngineOptions o;
  o.threads = 2;
  o.kv_block_size = 16;
  o.kv_offload.dir = FreshDir("kv-engine-evict");
  const uint64_t per_token = KvStorage::BytesFor(f.model->config.KvHeadsPerLayer(), 1, f.model->config.head_dim);
  o.kv_cache_mb = 1;
  const int64_t blocks = (1 << 20) / (per_token * 16);
  ASSERT_GT(blocks, 30);
  auto e = Engine::Create(*f.model, nullptr, f.kernels, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto run = [&](const std::vector<int32_t>& prompt) {
    RequestParams p;
    p.sampling.temperature = 0;
    p.max_tokens = 4;
    p.ignore_eos = true;
    EXPECT_TRUE((*e)->Add(prompt, p).ok());
    EngineFixture::Result r;
    while ((*e)->HasWork()) {
      for (const RequestOutput& out : (*e)->Step()) {
        r.tokens.insert(r.tokens.end(), out.tokens.begin(), out.tokens.end());
        if (out.finished) r.cached = out.cached_tokens;
      }
    }
    return r;
  };
  const std::vector<int32_t> a = LongPrompt(200);
  const EngineFixture::Result first = run(a);
  // Other prompts fill the pool several times over: a's blocks leave RAM.
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> other(static_cast<size_t>(blocks) * 16 - 64);
    for (size_t j = 0; j < other.size(); ++j) other[j] = static_cast<int32_t>((j * 31 + i * 7 + 3) % 300);
    run(other);
  }
  const EngineFixture::Result again = run(a);
  EXPECT_EQ(again.cached, 192);
  EXPECT_EQ(again.tokens, first.tokens);
  const EngineStats s = (*e)->Stats();
  ASSERT_EQ(s.kv_offload_tiers.size(), 1u);
  EXPECT_GE(s.kv_offload_tiers[0].hits, 12u);
  EXPECT_GE(s.kv_offload_loaded_blocks, 12u);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

}  // namespace
}  // namespace infera::kv_offload_test
