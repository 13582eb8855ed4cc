// Tensor and pipeline parallelism without MPI: the in-process threads
// communicator's collectives, and every rank of a split model (a thread
// each) giving the single-process logits — TP 2, PP 2, TP 2 x PP 2 — on the
// bundled model, the tinystories-3m fixture in several GGUF types, and every
// family shape (dense, fused, MoE, per-layer widths).
#include <cmath>
#include <thread>

#include <gtest/gtest.h>

#include "attention/kv_storage.h"
#include "base/paths.h"
#include "engine/parallel_executor.h"
#include "kernels/kernels.h"
#include "model/arch/registry.h"
#include "model/loader.h"
#include "model/model_runner.h"
#include "parallel/local_communicator.h"
#include "unit/test_util.h"

namespace infera::parallel_test {
namespace {

// Runs fn(rank) on n threads at once.
template <typename Fn>
void OnRanks(int n, Fn fn) {
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r) th.emplace_back([&, r] { fn(r); });
  for (auto& t : th) t.join();
}

TEST(LocalCommunicator, CollectivesAndPointToPoint) {
  auto comms = MakeLocalCommunicators(3);
  std::vector<std::vector<float>> sums(3), gathered(3), bcast(3), root_gather(3), received(3);
  OnRanks(3, [&](int r) {
    Communicator& c = *comms[r];
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.size(), 3);
    // Values whose float sum depends on the order: rank order must be used.
    std::vector<float> v = {r == 0 ? 1e8f : r == 1 ? -1e8f : 1.0f, float(r)};
    ASSERT_TRUE(c.AllReduceSum(v.data(), v.size()).ok());
    sums[r] = v;
    std::vector<float> mine = {float(r), float(10 * r)};
    gathered[r].resize(6);
    ASSERT_TRUE(c.AllGather(mine.data(), 2, gathered[r].data()).ok());
    bcast[r] = r == 1 ? std::vector<float>{7, 8, 9} : std::vector<float>(3, 0.0f);
    ASSERT_TRUE(c.Broadcast(bcast[r].data(), 3 * sizeof(float), 1).ok());
    // Uneven gather: rank r gives r + 1 values.
    std::vector<float> part(r + 1, float(r));
    root_gather[r].resize(6);
    ASSERT_TRUE(c.Gather(part.data(), {1, 2, 3}, root_gather[r].data(), 2).ok());
    // A ring of sends.
    const float token = 100.0f + r;
    ASSERT_TRUE(c.Send(&token, sizeof token, (r + 1) % 3).ok());
    float got = 0;
    ASSERT_TRUE(c.Recv(&got, sizeof got, (r + 2) % 3).ok());
    received[r] = {got};
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(sums[r][0], (1e8f + -1e8f) + 1.0f);
    EXPECT_EQ(sums[r][1], 3.0f);
    EXPECT_EQ(gathered[r], (std::vector<float>{0, 0, 1, 10, 2, 20}));
    EXPECT_EQ(bcast[r], (std::vector<float>{7, 8, 9}));
    EXPECT_EQ(received[r][0], 100.0f + (r + 2) % 3);
  }
  EXPECT_EQ(root_gather[2], (std::vector<float>{0, 1, 1, 2, 2, 2}));
  EXPECT_GT(comms[0]->stats().bytes_sent, 0u);
  EXPECT_GT(comms[0]->stats().calls, 4u);
}

TEST(LocalCommunicator, SplitFormsGroupsByColorAndKey) {
  auto comms = MakeLocalCommunicators(4);
  std::vector<int> sub_rank(4), sub_size(4);
  std::vector<float> sums(4);
  OnRanks(4, [&](int r) {
    // Two groups {0, 2} and {1, 3}, ranked by descending key.
    auto sub = comms[r]->Split(r % 2, -r);
    ASSERT_TRUE(sub.ok());
    sub_rank[r] = (*sub)->rank();
    sub_size[r] = (*sub)->size();
    float v = float(r);
    ASSERT_TRUE((*sub)->AllReduceSum(&v, 1).ok());
    sums[r] = v;
  });
  EXPECT_EQ(sub_rank, (std::vector<int>{1, 1, 0, 0}));
  EXPECT_EQ(sub_size, (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(sums, (std::vector<float>{2, 4, 2, 4}));
}

TEST(LocalCommunicator, AMissingRankTimesOutInsteadOfHanging) {
  auto comms = MakeLocalCommunicators(2, std::chrono::milliseconds(200));
  float v = 1;
  Status st = comms[0]->AllReduceSum(&v, 1);  // rank 1 never comes
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  float got;
  EXPECT_EQ(comms[1]->Recv(&got, sizeof got, 0).code(), StatusCode::kUnavailable);
}

TEST(StepMessage, BatchRoundTripsAndBadMessagesAreErrors) {
  std::vector<int32_t> a = {5, 6, 7, 8, 40, 41, 3}, b;
  for (int i = 0; i < 100; ++i) b.push_back(1000 + i);
  ForwardBatch fb;
  fb.seq_slots = {&a, &b};
  fb.Add(11, 6, 0, true);
  fb.Add(12, 99, 1, false);
  fb.Add(13, 98, 1, true);
  const std::vector<uint8_t> msg = EncodeBatch(fb);
  // Slots travel as runs: far smaller than the 107 slots themselves.
  EXPECT_LT(msg.size(), 107 * sizeof(int32_t));
  DecodedBatch d;
  ASSERT_TRUE(DecodeBatch(msg.data(), msg.size(), &d).ok());
  EXPECT_EQ(d.batch.tokens, fb.tokens);
  EXPECT_EQ(d.batch.positions, fb.positions);
  EXPECT_EQ(d.batch.seq, fb.seq);
  EXPECT_EQ(d.batch.logit_rows, fb.logit_rows);
  ASSERT_EQ(d.batch.seq_slots.size(), 2u);
  EXPECT_EQ(*d.batch.seq_slots[0], a);
  EXPECT_EQ(*d.batch.seq_slots[1], b);
  // Every truncation and a trailing byte are errors, never crashes.
  for (size_t n = 0; n < msg.size(); ++n) EXPECT_FALSE(DecodeBatch(msg.data(), n, &d).ok()) << n;
  std::vector<uint8_t> longer = msg;
  longer.push_back(0);
  EXPECT_FALSE(DecodeBatch(longer.data(), longer.size(), &d).ok());
  std::vector<uint8_t> bad = msg;
  bad[0] = 0xff;  // a negative length
  bad[3] = 0xff;
  EXPECT_FALSE(DecodeBatch(bad.data(), bad.size(), &d).ok());
}

// Two sequences: a prefill (7 and 5 tokens) and then a decode step of each.
std::vector<ForwardBatch> TestBatches(const std::vector<int32_t>* slots_a, const std::vector<int32_t>* slots_b,
                                      int n_vocab) {
  std::vector<ForwardBatch> out(2);
  auto tok = [&](int i) { return (i * 37 + 11) % n_vocab; };
  out[0].seq_slots = {slots_a, slots_b};
  for (int p = 0; p < 7; ++p) out[0].Add(tok(p), p, 0, true);
  for (int p = 0; p < 5; ++p) out[0].Add(tok(p + 50), p, 1, p == 4);
  out[1].seq_slots = {slots_a, slots_b};
  out[1].Add(tok(99), 7, 0, true);
  out[1].Add(tok(98), 5, 1, true);
  return out;
}

// Logits of the test batches, one process (layout 1 x 1) or split over
// threads as ranks (rank 0's logits).
std::vector<std::vector<float>> RunLayout(const std::string& path, const ParallelLayout& layout) {
  const KernelTable kernels = MakeBestKernelTable();
  const int n = layout.world_size();
  auto comms = MakeLocalCommunicators(n);
  std::vector<int32_t> slots_a, slots_b;
  for (int i = 0; i < 32; ++i) {
    slots_a.push_back(i);
    slots_b.push_back(63 - i);  // not in order
  }
  std::vector<std::vector<float>> result;
  OnRanks(n, [&](int r) {
    ModelLoadOptions lo;
    lo.layout = layout;
    lo.rank = r;
    auto m = LoadModel(path, lo);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    std::unique_ptr<Communicator> tp;
    ParallelComms pc;
    if (n > 1) {
      auto sub = comms[r]->Split(r / layout.tp, r % layout.tp);
      ASSERT_TRUE(sub.ok());
      tp = std::move(sub).value();
      pc = {comms[r].get(), tp.get()};
    }
    ThreadPool pool(1);
    auto runner = MakeModelRunner(**m, kernels, pool, 0, pc);
    KvStorage kv((*m)->config.KvHeadsPerLayer(), 64, (*m)->config.head_dim);
    std::vector<float> logits;
    for (const ForwardBatch& b : TestBatches(&slots_a, &slots_b, (*m)->config.n_vocab)) {
      Status st = runner->Forward(b, kv, &logits);
      ASSERT_TRUE(st.ok()) << st.ToString();
      if (r == 0) {
        EXPECT_EQ(logits.size(), b.logit_rows.size() * (*m)->config.n_vocab);
        result.push_back(logits);
      } else {
        EXPECT_TRUE(logits.empty());
      }
    }
  });
  return result;
}

// Split logits against one process's: exactly equal for pipeline stages
// alone; with tensor-parallel ranks (partial products summed in rank order)
// within `tol` of the largest logit. Quantized weights take activations
// rounded to int8, where a last-bit difference in a sum can move one value
// by a rounding step, so they get `quant_tol` and must keep each row's top
// token (unless the top two are closer than the difference).
void ExpectLayoutsMatch(const std::string& path, bool quantized = false) {
  const double tol = quantized ? 3e-2 : 1e-5;
  const auto whole = RunLayout(path, {});
  ASSERT_EQ(whole.size(), 2u);
  for (ParallelLayout layout : {ParallelLayout{2, 1, {}}, ParallelLayout{1, 2, {}}, ParallelLayout{2, 2, {}}}) {
    SCOPED_TRACE(::testing::Message() << path << " tp " << layout.tp << " pp " << layout.pp);
    const auto split = RunLayout(path, layout);
    ASSERT_EQ(split.size(), whole.size());
    for (size_t s = 0; s < whole.size(); ++s) {
      ASSERT_EQ(split[s].size(), whole[s].size());
      double max_abs = 0, max_diff = 0;
      for (size_t i = 0; i < whole[s].size(); ++i) {
        max_abs = std::max(max_abs, std::fabs(double(whole[s][i])));
        max_diff = std::max(max_diff, std::fabs(double(whole[s][i]) - split[s][i]));
      }
      if (layout.tp == 1) {
        EXPECT_EQ(max_diff, 0.0) << "pipeline stages alone change no arithmetic";
        continue;
      }
      EXPECT_LE(max_diff, tol * max_abs) << "step " << s;
      const int64_t V = static_cast<int64_t>(whole[s].size() / (s == 0 ? 8 : 2));
      for (size_t row = 0; row * V < whole[s].size(); ++row) {
        const float* a = &whole[s][row * V];
        const float* b = &split[s][row * V];
        const int64_t top_a = std::max_element(a, a + V) - a, top_b = std::max_element(b, b + V) - b;
        if (top_a != top_b) {
          EXPECT_LE(std::fabs(a[top_a] - a[top_b]), 2 * max_diff) << "step " << s << " row " << row;
        }
      }
    }
  }
}

TEST(SplitModel, BundledModelMatchesOneProcess) {
  auto path = FindDefaultModel();
  ASSERT_TRUE(path.ok());
  ExpectLayoutsMatch(*path);
}

TEST(SplitModel, TinyStoriesEveryTypeMatchesOneProcess) {
  if (!testing::SharedAvailable()) GTEST_SKIP() << "no ../shared";
  for (const std::string t : {"f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k",
                              "q6_k", "iq4_nl", "q4_k_m-mix"}) {
    ExpectLayoutsMatch(testing::SharedDir() + "/models/tinystories-3m/tinystories-3m-" + t + ".gguf", t[0] != 'f');
  }
}

TEST(SplitModel, RefusesHeadsThatDoNotDivide) {
  auto path = FindDefaultModel();
  ASSERT_TRUE(path.ok());
  ModelLoadOptions lo;
  lo.layout = {3, 1, {}};  // 4 KV heads
  auto m = LoadModel(*path, lo);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("KV heads"), std::string::npos) << m.status().ToString();
  lo.layout = {1, 7, {}};  // 6 layers
  EXPECT_EQ(LoadModel(*path, lo).status().code(), StatusCode::kInvalidArgument);
  lo.layout = {1, 2, {5, 2}};  // 7 layers named
  EXPECT_EQ(LoadModel(*path, lo).status().code(), StatusCode::kInvalidArgument);
}

TEST(SplitModel, UnevenStagesAndShardMemory) {
  auto path = FindDefaultModel();
  ASSERT_TRUE(path.ok());
  const auto whole = RunLayout(*path, {});
  const auto split = RunLayout(*path, {1, 2, {5, 1}});
  ASSERT_EQ(split, whole);
  // Each TP 2 rank holds about half the layers' weights.
  auto one = LoadModel(*path);
  ASSERT_TRUE(one.ok());
  for (int r = 0; r < 2; ++r) {
    ModelLoadOptions lo;
    lo.layout = {2, 1, {}};
    lo.rank = r;
    auto m = LoadModel(*path, lo);
    ASSERT_TRUE(m.ok());
    const double ratio = double((*m)->weights->resident_bytes()) / double((*one)->weights->resident_bytes());
    EXPECT_LT(ratio, 0.6) << "rank " << r;
    EXPECT_GT(ratio, 0.45) << "rank " << r;
  }
}

// Every family's shape (fused QKV / gate-up, biases, norms, soft-caps,
// sliding windows, MoE with and without a shared expert), random weights.
TEST(SplitModel, EveryFamilyShardsCorrectly) {
  for (const ArchInfo* arch : AllArchs()) {
    const ModelConfig c = testing::TinyArchConfig(*arch);
    SCOPED_TRACE(arch->name);
    ExpectLayoutsMatch(testing::WriteTinyModel(c, DType::kF32, 5, std::string("split-") + arch->name + ".gguf"));
  }
}

}  // namespace
}  // namespace infera::parallel_test
