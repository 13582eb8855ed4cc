// Forward passes started part-way (ResidualTap, BlockInputCache): for every
// family, passes resumed at any block from the kept residual stream give the
// logits of whole passes bit for bit, including a decode step that reads the
// K/V the resumed prefill wrote; a pass with other tokens runs whole.
#include <gtest/gtest.h>

#include "attention/kv_storage.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "model/arch/registry.h"
#include "model/block_input_cache.h"
#include "model/decoder.h"
#include "model/loader.h"
#include "prune/model_pruning.h"
#include "unit/test_util.h"

namespace infera::block_input_cache_test {
namespace {

// Two sequences: a prefill (6 and 4 tokens) and then a decode step of each.
std::vector<ForwardBatch> Batches(const std::vector<int32_t>* slots_a, const std::vector<int32_t>* slots_b, int n_vocab,
                                  int salt) {
  std::vector<ForwardBatch> out(2);
  auto tok = [&](int i) { return (i * 37 + 11 + salt) % n_vocab; };
  out[0].seq_slots = {slots_a, slots_b};
  for (int p = 0; p < 6; ++p) out[0].Add(tok(p), p, 0, true);
  for (int p = 0; p < 4; ++p) out[0].Add(tok(p + 50), p, 1, p == 3);
  out[1].seq_slots = {slots_a, slots_b};
  out[1].Add(tok(99), 6, 0, true);
  out[1].Add(tok(98), 4, 1, true);
  return out;
}

// The logits of every pass of one run, with a fresh K/V store.
std::vector<std::vector<float>> RunPasses(const Model& m, const KernelTable& kernels, BlockInputCache* cache,
                                          int salt = 0) {
  std::vector<int32_t> slots_a, slots_b;
  for (int i = 0; i < 16; ++i) {
    slots_a.push_back(i);
    slots_b.push_back(31 - i);
  }
  ThreadPool pool(2);
  DecoderRunner runner(m, kernels, pool);
  runner.set_residual_tap(cache);
  KvStorage kv(m.config.KvHeadsPerLayer(), 32, m.config.head_dim);
  std::vector<std::vector<float>> out;
  for (const ForwardBatch& b : Batches(&slots_a, &slots_b, m.config.n_vocab, salt)) {
    std::vector<float> logits;
    Status st = runner.Forward(b, kv, &logits);
    EXPECT_TRUE(st.ok()) << st.ToString();
    out.push_back(logits);
  }
  return out;
}

// A small model of `arch`'s shape (null: Llama; testing::TinyArchConfig).
ModelConfig SmallShape(const ArchInfo* arch) { return testing::TinyArchConfig(arch != nullptr ? *arch : LlamaArch()); }

TEST(BlockInputCache, ResumedPassesEqualWholePassesForEveryFamily) {
  const KernelTable kernels = MakeBestKernelTable();
  for (const ArchInfo* arch : AllArchs()) {
    SCOPED_TRACE(arch->name);
    const ModelConfig c = SmallShape(arch);
    auto m = LoadModel(testing::WriteTinyModel(c, DType::kF32, 7, std::string("resume-") + arch->name + ".gguf"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const int n_blocks = 2 * (*m)->config.n_layer;
    const auto whole = RunPasses(**m, kernels, nullptr);

    BlockInputCache cache;
    cache.StartRun(BlockInputCache::Mode::kKeep);
    EXPECT_EQ(RunPasses(**m, kernels, &cache), whole);  // keeping changes nothing
    // (6 + 4) + 2 tokens, 2 n_layer + 1 block inputs of n_embd floats each.
    EXPECT_EQ(cache.bytes(), size_t(12) * (n_blocks + 1) * 64 * sizeof(float));
    for (int block = 0; block <= n_blocks; ++block) {
      cache.StartRun(BlockInputCache::Mode::kResume, block);
      EXPECT_EQ(RunPasses(**m, kernels, &cache), whole) << "from block " << block;
      EXPECT_EQ(cache.unmatched(), 0);
    }
    // Other tokens: every pass runs whole (and so still computes its own logits).
    const auto other = RunPasses(**m, kernels, nullptr, /*salt=*/5);
    ASSERT_NE(other, whole);
    cache.StartRun(BlockInputCache::Mode::kResume, 3);
    EXPECT_EQ(RunPasses(**m, kernels, &cache, 5), other);
    EXPECT_EQ(cache.unmatched(), 2);
  }
}

// What a resumed pass skips: after changing a weight in block 2 l + 1 (layer
// l's FFN), passes resumed at that block see the change, and those resumed
// after it do not (their input was kept before the change).
TEST(BlockInputCache, BlocksBeforeTheResumePointDoNotRun) {
  const KernelTable kernels = MakeBestKernelTable();
  const ModelConfig c = SmallShape(nullptr);
  auto m = LoadModel(testing::WriteTinyModel(c, DType::kF32, 9, "resume-skip.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_GE((*m)->config.n_layer, 2);
  ASSERT_TRUE(prune::MakeLayerMatricesF32(m->get()).ok());  // editable copies (the file is mapped read-only)
  BlockInputCache cache;
  cache.StartRun(BlockInputCache::Mode::kKeep);
  const auto before = RunPasses(**m, kernels, &cache);
  // Layer 0's FFN down matrix (f32) scaled by 2: block 1.
  WeightMatrix& down = (*m)->weights->layers[0].w_down;
  ASSERT_EQ(down.type, DType::kF32);
  float* w = const_cast<float*>(reinterpret_cast<const float*>(down.data));
  for (int64_t i = 0; i < down.n_out * down.n_in; ++i) w[i] *= 2;
  const auto changed = RunPasses(**m, kernels, nullptr);
  ASSERT_NE(changed, before);
  cache.StartRun(BlockInputCache::Mode::kResume, 1);
  EXPECT_EQ(RunPasses(**m, kernels, &cache), changed);
  cache.StartRun(BlockInputCache::Mode::kResume, 2);
  EXPECT_EQ(RunPasses(**m, kernels, &cache), before);
}

// The layer-by-layer calibration order (Calibrator::RunLayer): the passes
// for layer l start at layer l - 1 and stop after layer l's FFN, after layer
// l - 1 changed. Each layer sees the inputs whole passes over the changed
// model show it, bit for bit, and stopped passes return zero logits.
TEST(BlockInputCache, LayerByLayerPassesSeeWhatWholePassesSee) {
  const KernelTable kernels = MakeBestKernelTable();
  ModelConfig c = SmallShape(nullptr);
  c.n_layer = 4;
  auto m = LoadModel(testing::WriteTinyModel(c, DType::kF32, 11, "resume-layers.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE(prune::MakeLayerMatricesF32(m->get()).ok());
  const int n_layer = (*m)->config.n_layer;
  ASSERT_EQ(n_layer, 4);
  BlockInputCache layered;
  for (int l = 0; l < n_layer; ++l) {
    SCOPED_TRACE(l);
    const auto full_logits = RunPasses(**m, kernels, nullptr);  // whole passes over the model as it is now
    layered.StartRun(BlockInputCache::Mode::kResumeAndKeep, std::max(0, 2 * (l - 1)), 2 * l + 2);
    const auto stopped = RunPasses(**m, kernels, &layered);
    EXPECT_EQ(layered.unmatched(), 0);
    if (l + 1 < n_layer) {  // stopped early (the last layer's passes run to the logits)
      for (const auto& logits : stopped) {
        for (float v : logits) ASSERT_EQ(v, 0.0f);
      }
    } else {
      EXPECT_EQ(stopped, full_logits);
    }
    // Layer l's FFN input as kept: what whole passes compute there.
    layered.StartRun(BlockInputCache::Mode::kResume, 2 * l + 1);
    EXPECT_EQ(RunPasses(**m, kernels, &layered), full_logits);
    EXPECT_EQ(layered.unmatched(), 0);
    // Then layer l changes (as GPTQ or pruning change it): its FFN down
    // matrix and its attention output matrix scaled.
    for (WeightMatrix* wm : {&(*m)->weights->layers[l].w_down, &(*m)->weights->layers[l].wo}) {
      float* w = const_cast<float*>(reinterpret_cast<const float*>(wm->data));
      for (int64_t i = 0; i < wm->n_out * wm->n_in; ++i) w[i] *= 0.5f + 0.1f * l;
    }
  }
  // Going forward, a run drops the inputs between block 0 and its start:
  // resuming there runs whole.
  const auto whole = RunPasses(**m, kernels, nullptr);
  layered.StartRun(BlockInputCache::Mode::kResume, 2);
  EXPECT_EQ(RunPasses(**m, kernels, &layered), whole);
  EXPECT_EQ(layered.unmatched(), 2);
  // A kept pass holds only the blocks before the stop of its last run:
  // resuming past them runs whole too.
  layered.StartRun(BlockInputCache::Mode::kResumeAndKeep, 0, 4);
  RunPasses(**m, kernels, &layered);
  layered.StartRun(BlockInputCache::Mode::kResume, 2);
  EXPECT_EQ(RunPasses(**m, kernels, &layered), whole);
  EXPECT_EQ(layered.unmatched(), 0);
  layered.StartRun(BlockInputCache::Mode::kResume, 6);
  EXPECT_EQ(RunPasses(**m, kernels, &layered), whole);
  EXPECT_EQ(layered.unmatched(), 2);
}

}  // namespace
}  // namespace infera::block_input_cache_test
