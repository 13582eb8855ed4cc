// Block pool, block tables, prefix cache and scheduler: pure logic, driven
// without a model (the "executor" here just invents sampled tokens).
#include <algorithm>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "kv_cache/block_manager.h"
#include "scheduler/scheduler.h"

namespace infera::scheduler_test {
namespace {

TEST(BlockPool, RefCountsCacheAndEviction) {
  BlockPool pool(3, 4);
  const int32_t toks[4] = {1, 2, 3, 4};
  auto a = pool.Allocate(), b = pool.Allocate(), c = pool.Allocate();
  ASSERT_TRUE(a && b && c);
  EXPECT_FALSE(pool.Allocate().has_value());
  const uint64_t key = BlockPool::ChainKey(0, toks, 4);
  pool.Register(*a, key, toks);
  pool.DecRef(*a);  // cached, evictable
  EXPECT_EQ(pool.num_free(), 1);
  auto hit = pool.Lookup(key, toks);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit, *a);
  const int32_t other[4] = {1, 2, 3, 5};
  EXPECT_FALSE(pool.Lookup(key, other).has_value());  // same key, other tokens: no hit
  pool.DecRef(*a);
  auto d = pool.Allocate();  // evicts the cached block
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, *a);
  EXPECT_FALSE(pool.Lookup(key, toks).has_value());
  pool.DecRef(*b);
  pool.DecRef(*c);
  pool.DecRef(*d);
  EXPECT_TRUE(pool.AllFree());
}

TEST(BlockManager, SharesFullPrefixBlocksOnly) {
  BlockManager bm(16, 4, true);
  std::vector<int32_t> t(10);
  for (int i = 0; i < 10; ++i) t[i] = 100 + i;
  EXPECT_EQ(bm.StartWithPrefix(1, t, 9), 0);
  ASSERT_TRUE(bm.Grow(1, 10));
  bm.Commit(1, t, 10);  // blocks 0 and 1 full -> cached
  EXPECT_EQ(bm.StartWithPrefix(2, t, 9), 8);
  EXPECT_EQ(bm.Slots(2)[0], bm.Slots(1)[0]);
  ASSERT_TRUE(bm.Grow(2, 10));
  EXPECT_NE(bm.Slots(2)[8], bm.Slots(1)[8]);  // the partial block is its own
  // At most max_cached tokens are taken.
  EXPECT_EQ(bm.StartWithPrefix(3, t, 7), 4);
  bm.Free(1);
  bm.Free(2);
  bm.Free(3);
  EXPECT_TRUE(bm.pool().AllFree());
  EXPECT_EQ(bm.prefix_hits(), 12u);
}

// Runs the scheduler to completion with an executor that appends a token to
// every chunk that wants logits; returns the tokens of each request.
struct Sim {
  BlockManager bm;
  Scheduler sched;
  std::map<uint64_t, int32_t> remaining;
  std::map<uint64_t, std::vector<int32_t>> outputs;
  Sim(int32_t blocks, int32_t bs, SchedulerConfig cfg, bool prefix = true) : bm(blocks, bs, prefix), sched(cfg, &bm) {}
  void Add(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens, int32_t prio = 0) {
    ASSERT_TRUE(sched.Add(id, std::move(prompt), max_tokens, prio).ok());
    remaining[id] = max_tokens;
  }
  // The "model": the next token is a function of the sequence so far, so
  // recomputation after preemption must reproduce the same outputs.
  static int32_t Next(const std::vector<int32_t>& toks) {
    uint64_t h = 7;
    for (int32_t t : toks) h = h * 31 + static_cast<uint64_t>(t);
    return static_cast<int32_t>(h % 50);
  }
  void Step() {
    SchedulerOutput out = sched.Schedule();
    sched.Computed(out);
    for (const auto& c : out.chunks) {
      if (!c.want_logits) continue;
      const int32_t tok = Next(sched.Tokens(c.id));
      sched.Append(c.id, tok);
      outputs[c.id].push_back(tok);
      if (--remaining[c.id] == 0) sched.Finish(c.id);
    }
  }
};

TEST(BlockManager, KeyRootsKeepPrefixesApart) {
  // Sequences whose K/V differs for the same tokens (LoRA scales) start their
  // key chains at different roots and never share a block.
  BlockManager bm(16, 4, true);
  bm.set_record_commits(true);
  std::vector<int32_t> t(9, 7);
  EXPECT_EQ(bm.StartWithPrefix(1, t, 8, /*root=*/42), 0);
  ASSERT_TRUE(bm.Grow(1, 9));
  bm.Commit(1, t, 9);
  EXPECT_TRUE(bm.TakeCommitted().empty());    // the offload tiers take the plain model's blocks only
  EXPECT_EQ(bm.StartWithPrefix(2, t, 8), 0);  // the plain model: a miss
  EXPECT_EQ(bm.StartWithPrefix(3, t, 8, 43), 0);
  EXPECT_EQ(bm.StartWithPrefix(4, t, 8, 42), 8);  // the same root: a hit
  EXPECT_EQ(bm.Slots(4)[0], bm.Slots(1)[0]);
  for (uint64_t id : {1, 2, 3, 4}) bm.Free(id);
  EXPECT_TRUE(bm.pool().AllFree());
}

TEST(Scheduler, PrefixCacheComputesOnlyTheSuffix) {
  SchedulerConfig cfg;
  cfg.max_batched_tokens = 256;
  cfg.max_model_len = 4096;
  Sim sim(512, 16, cfg);
  std::vector<int32_t> prefix(1000);
  for (int i = 0; i < 1000; ++i) prefix[i] = i % 97;
  auto p1 = prefix, p2 = prefix;
  p1.insert(p1.end(), {1, 2, 3});
  p2.insert(p2.end(), {4, 5, 6, 7, 8});
  sim.Add(1, p1, 4);
  while (sim.sched.HasWork()) sim.Step();
  const uint64_t before = sim.sched.prefill_tokens_computed();
  EXPECT_EQ(before, 1003u);
  sim.Add(2, p2, 4);
  while (sim.sched.HasWork()) sim.Step();
  // 1000 / 16 = 62 full blocks = 992 cached tokens; 13 computed.
  EXPECT_EQ(sim.sched.prefill_tokens_computed() - before, 1005u - 992u);
  EXPECT_TRUE(sim.bm.pool().AllFree());
}

TEST(Scheduler, PreemptionFinishesEveryRequestWithTheSameOutput) {
  SchedulerConfig cfg;
  cfg.max_batched_tokens = 64;
  cfg.max_model_len = 512;
  // Each request needs up to 6 blocks; the pool holds a quarter of 64 x 6.
  std::map<uint64_t, std::vector<int32_t>> alone;
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts(64);
  for (auto& p : prompts) {
    p.resize(20 + rng() % 40);
    for (auto& t : p) t = static_cast<int32_t>(rng() % 50);
  }
  for (uint64_t i = 0; i < 64; ++i) {
    Sim one(64, 16, cfg);
    one.Add(i, prompts[i], 32);
    while (one.sched.HasWork()) one.Step();
    alone[i] = one.outputs[i];
  }
  Sim sim(96, 16, cfg);
  for (uint64_t i = 0; i < 64; ++i) sim.Add(i, prompts[i], 32, static_cast<int32_t>(i % 3));
  int steps = 0;
  while (sim.sched.HasWork() && steps < 100000) {
    sim.Step();
    ++steps;
  }
  EXPECT_FALSE(sim.sched.HasWork());
  EXPECT_GT(sim.sched.num_preemptions(), 0u);
  for (uint64_t i = 0; i < 64; ++i) EXPECT_EQ(sim.outputs[i], alone[i]) << i;
  EXPECT_TRUE(sim.bm.pool().AllFree());
}

// Drafted tokens never cost another running sequence its block: with one
// free block left, sequence 1's draft is dropped and sequence 2 decodes.
TEST(Scheduler, DraftsNeverCausePreemption) {
  BlockManager bm(5, 2, /*prefix_caching=*/false);
  SchedulerConfig cfg;
  cfg.max_model_len = 10;
  Scheduler sched(cfg, &bm);
  ASSERT_TRUE(sched.Add(1, {1, 2, 3}, 4, 0).ok());
  ASSERT_TRUE(sched.Add(2, {4, 5, 6, 7}, 4, 0).ok());
  SchedulerOutput out = sched.Schedule();  // both prompts: 2 + 2 blocks
  ASSERT_EQ(out.chunks.size(), 2u);
  sched.Computed(out);
  sched.Append(1, 8);  // 4 tokens: still 2 blocks
  sched.Append(2, 9);  // 5 tokens: needs a third block
  ASSERT_EQ(bm.num_free_blocks(), 1);
  sched.SetDraft(1, {10, 11});
  out = sched.Schedule();
  EXPECT_TRUE(out.preempted.empty());
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_TRUE(out.chunks[0].draft.empty());
  EXPECT_EQ(out.chunks[1].id, 2u);
  EXPECT_EQ(out.num_tokens, 2);
  // With room, the draft is scheduled (and counted in the step's tokens).
  sched.Computed(out);
  sched.Finish(2);
  sched.Append(1, 12);
  sched.SetDraft(1, {13, 14});
  out = sched.Schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].draft, (std::vector<int32_t>{13, 14}));
  EXPECT_EQ(out.num_tokens, 3);
  sched.Finish(1);
  EXPECT_TRUE(bm.pool().AllFree());
}

TEST(Scheduler, GuaranteedAdmissionNeverPreempts) {
  SchedulerConfig cfg;
  cfg.max_batched_tokens = 64;
  cfg.max_model_len = 512;
  cfg.guaranteed_admission = true;
  Sim sim(40, 16, cfg);
  for (uint64_t i = 0; i < 20; ++i) sim.Add(i, std::vector<int32_t>(30, static_cast<int32_t>(i)), 40);
  while (sim.sched.HasWork()) sim.Step();
  EXPECT_EQ(sim.sched.num_preemptions(), 0u);
  for (uint64_t i = 0; i < 20; ++i) EXPECT_EQ(sim.outputs[i].size(), 40u);
  EXPECT_TRUE(sim.bm.pool().AllFree());
}

TEST(Scheduler, RefusesWhatCanNeverFitAndHonoursPriority) {
  SchedulerConfig cfg;
  cfg.max_model_len = 100;
  cfg.max_num_seqs = 1;
  Sim sim(4, 16, cfg);
  EXPECT_FALSE(sim.sched.Add(1, std::vector<int32_t>(90, 1), 20, 0).ok());  // beyond the context
  EXPECT_FALSE(sim.sched.Add(2, std::vector<int32_t>(60, 1), 20, 0).ok());  // beyond the pool
  EXPECT_FALSE(sim.sched.Add(3, {}, 5, 0).ok());
  sim.Add(10, {1, 2, 3}, 2, 5);
  sim.Add(11, {4, 5, 6}, 2, -1);  // arrives later, served first
  SchedulerOutput out = sim.sched.Schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].id, 11u);
}

// 10,000 random submit / step / cancel operations, then everything ends:
// every block is free and every reference count zero.
TEST(Scheduler, RandomOperationsLeaveThePoolEmpty) {
  SchedulerConfig cfg;
  cfg.max_batched_tokens = 48;
  cfg.max_num_seqs = 8;
  cfg.max_model_len = 256;
  Sim sim(40, 8, cfg);
  std::mt19937 rng(42);
  uint64_t next = 0;
  std::vector<uint64_t> live;
  for (int op = 0; op < 10000; ++op) {
    const int r = static_cast<int>(rng() % 10);
    if (r < 3 && live.size() < 32) {
      std::vector<int32_t> p(1 + rng() % 60);
      for (auto& t : p) t = static_cast<int32_t>(rng() % 4);  // small alphabet: shared prefixes
      const uint64_t id = next++;
      if (sim.sched.Add(id, p, 1 + static_cast<int32_t>(rng() % 40), static_cast<int32_t>(rng() % 3)).ok()) {
        sim.remaining[id] = 1 << 30;
        live.push_back(id);
      }
    } else if (r < 4 && !live.empty()) {
      const size_t k = rng() % live.size();
      sim.sched.Finish(live[k]);  // cancel or finish
      live.erase(live.begin() + static_cast<long>(k));
    } else {
      SchedulerOutput out = sim.sched.Schedule();
      sim.sched.Computed(out);
      for (const auto& c : out.chunks) {
        if (!c.want_logits || !sim.sched.Has(c.id)) continue;
        sim.sched.Append(c.id, static_cast<int32_t>(rng() % 4));
        if (sim.sched.Tokens(c.id).size() >= 100) {  // the engine's max_tokens
          sim.sched.Finish(c.id);
          live.erase(std::find(live.begin(), live.end(), c.id));
        }
      }
    }
    ASSERT_LE(sim.bm.pool().num_used(), sim.bm.num_blocks());
  }
  for (uint64_t id : live) sim.sched.Finish(id);
  EXPECT_FALSE(sim.sched.HasWork());
  EXPECT_TRUE(sim.bm.pool().AllFree());
  for (int32_t b = 0; b < sim.bm.num_blocks(); ++b) EXPECT_EQ(sim.bm.pool().RefCount(b), 0);
}

}  // namespace
}  // namespace infera::scheduler_test
