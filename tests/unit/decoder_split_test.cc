// Small ops inline or split (KernelTable::min_split_bytes): a model small
// enough to run from cache runs its small ops on the calling thread, and its
// logits are the same bits as with every op split over two threads and as
// with one thread, for every family, over a prefill of two sequences (a
// block of 40 tokens, enough that attention and the per-token loops split)
// and decode steps.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attention/kv_storage.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "model/arch/registry.h"
#include "model/decoder.h"
#include "model/loader.h"
#include "unit/test_util.h"

namespace infera::decoder_split_test {
namespace {

// The logits of a prefill (40 + 7 tokens of two sequences) and three decode
// steps of both, with `threads` threads and ops below `min_split` bytes inline
// (-1: the runner's own choice).
std::vector<std::vector<float>> RunPasses(const Model& m, int threads, int64_t min_split, int64_t* chosen = nullptr) {
  constexpr int32_t kLenA = 40, kLenB = 7, kSteps = 3;
  std::vector<int32_t> slots_a, slots_b;
  for (int i = 0; i < kLenA + kSteps; ++i) slots_a.push_back(i);
  for (int i = 0; i < kLenB + kSteps; ++i) slots_b.push_back(100 + i);
  ThreadPool pool(threads);
  const KernelTable kernels = MakeBestKernelTable();
  DecoderRunner runner(m, kernels, pool);
  if (chosen != nullptr) *chosen = runner.min_split_bytes();
  if (min_split >= 0) runner.set_min_split_bytes(min_split);
  KvStorage kv(m.config.KvHeadsPerLayer(), 128, m.config.head_dim);
  const int n_vocab = m.config.n_vocab;
  auto tok = [&](int i) { return (i * 37 + 11) % n_vocab; };
  std::vector<ForwardBatch> batches(1 + kSteps);
  for (ForwardBatch& b : batches) b.seq_slots = {&slots_a, &slots_b};
  for (int p = 0; p < kLenA; ++p) batches[0].Add(tok(p), p, 0, true);
  for (int p = 0; p < kLenB; ++p) batches[0].Add(tok(p + 50), p, 1, true);
  for (int s = 0; s < kSteps; ++s) {
    batches[1 + s].Add(tok(90 + s), kLenA + s, 0, true);
    batches[1 + s].Add(tok(70 + s), kLenB + s, 1, true);
  }
  std::vector<std::vector<float>> out;
  for (const ForwardBatch& b : batches) {
    std::vector<float> logits;
    const Status st = runner.Forward(b, kv, &logits);
    EXPECT_TRUE(st.ok()) << st.ToString();
    out.push_back(logits);
  }
  return out;
}

TEST(DecoderSplit, InlineSplitAndOneThreadGiveTheSameLogitsForEveryFamily) {
  for (const ArchInfo* arch : AllArchs()) {
    SCOPED_TRACE(arch->name);
    const ModelConfig c = testing::TinyArchConfig(*arch);
    auto m = LoadModel(testing::WriteTinyModel(c, DType::kF32, 11, std::string("split-") + arch->name + ".gguf"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    int64_t chosen = -1;
    const auto inline_small = RunPasses(**m, 2, -1, &chosen);
    EXPECT_EQ(chosen, DecoderRunner::kCacheResidentMinSplitBytes);  // a model in cache
    EXPECT_EQ(RunPasses(**m, 2, 0), inline_small);                  // every op split
    EXPECT_EQ(RunPasses(**m, 1, -1), inline_small);                 // one thread
    // Everything inline on two threads.
    EXPECT_EQ(RunPasses(**m, 2, int64_t{1} << 40), inline_small);
  }
}

}  // namespace
}  // namespace infera::decoder_split_test
