// infera imatrix -m MODEL -f CALIB.txt [-o imatrix.gguf]: runs calibration
// text through the model and records, for every linear weight of every
// layer, the per-input-column sum of squared activations and token counts
// (per expert for MoE) — llama.cpp's importance matrix, in its GGUF or legacy
// .dat format — for `infera quantize --imatrix`.
#include <unistd.h>

#include <cstdio>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "base/output_file.h"
#include "model/tensor_schema.h"
#include "quant/imatrix.h"
#include "tools/commands.h"
#include "tools/prune_calibration.h"

namespace infera::cli {
namespace {

struct ImatrixArgs {
  std::string model;
  std::vector<std::string> positional;
  std::string calib;
  std::string out = "imatrix.gguf";
  std::string format;  // "", "gguf", "dat"
  std::string tokenizer;
  int chunks = 0;  // 0: all
  int ctx = 512;
  int threads = 0;
};

// Which decoder input feeds a role's matrix (none for the embeddings and
// the output, which llama-imatrix leaves out too).
std::optional<LinearInput> InputOfRole(const TensorRole& r) {
  if (r.layer_experts == &LayerWeights::exp_gate || r.layer_experts == &LayerWeights::exp_up) {
    return LinearInput::kExpertIn;
  }
  if (r.layer_experts == &LayerWeights::exp_down) return LinearInput::kExpertMid;
  WeightMatrix LayerWeights::*m = r.layer_matrix ? r.layer_matrix : (r.parts.empty() ? nullptr : r.parts[0].dest);
  if (m == nullptr) return std::nullopt;
  if (m == &LayerWeights::wq || m == &LayerWeights::wk || m == &LayerWeights::wv) return LinearInput::kAttnIn;
  if (m == &LayerWeights::wo) return LinearInput::kAttnOut;
  if (m == &LayerWeights::w_gate || m == &LayerWeights::w_up || m == &LayerWeights::router ||
      m == &LayerWeights::sh_gate || m == &LayerWeights::sh_up) {
    return LinearInput::kFfnIn;
  }
  if (m == &LayerWeights::w_down) return LinearInput::kFfnMid;
  if (m == &LayerWeights::sh_down) return LinearInput::kSharedMid;
  return std::nullopt;
}

// Adds every observed input to the entries of the weights it feeds.
// Observe runs on the engine's thread, one call at a time.
class ImatrixCollector : public ActivationObserver {
 public:
  ImatrixCollector(const ModelConfig& c, Imatrix* out) : out_(out) {
    ForEachTensor(c, [&](const TensorRole& r, int layer) {
      if (layer < 0 || !r.matrix) return;
      if (auto in = InputOfRole(r)) {
        targets_[{layer, *in}].push_back({GgufTensorName(r, layer), IsExpertRole(r) ? c.n_expert : 1});
      }
    });
  }
  bool Wants(int) const override { return true; }
  void Observe(int layer, LinearInput which, int expert, const float* x, int64_t rows, int64_t width) override {
    auto it = targets_.find({layer, which});
    if (it == targets_.end() || rows == 0) return;
    for (const auto& [name, n_mat] : it->second) {
      const int64_t mat = n_mat > 1 ? expert : 0;
      if (mat < 0 || mat >= n_mat) continue;
      if (Status st = out_->Add(name, n_mat, mat, x, rows, width); !st.ok() && status_.ok()) status_ = st;
    }
  }
  const Status& status() const { return status_; }

 private:
  struct Target {
    std::string name;
    int64_t n_mat;
  };
  std::map<std::pair<int, LinearInput>, std::vector<Target>> targets_;
  Imatrix* out_;
  Status status_;
};

int RunImatrix(const ImatrixArgs& a, const RuntimeOptions& rt) {
  std::string model_path = a.model;
  if (!a.positional.empty()) {
    if (!model_path.empty() || a.positional.size() > 1) return ReportError("usage: infera imatrix -m MODEL -f CALIB.txt -o OUT");
    model_path = a.positional[0];
  }
  if (a.calib.empty()) return ReportError("imatrix needs -f CALIB.txt (calibration text)");
  if (a.format != "" && a.format != "gguf" && a.format != "dat") return ReportError("--output-format must be gguf or dat");
  const bool legacy = a.format == "dat" || (a.format.empty() && a.out.ends_with(".dat"));
  if (a.ctx < 16) return ReportError("--ctx must be >= 16");
  if (a.chunks < 0) return ReportError("--chunks must be >= 0 (0: all)");
  if (Status st = CheckOutputNotInput(a.out, {ModelPathOrDefault(model_path), a.calib, a.tokenizer}); !st.ok()) {
    return ReportError(st);
  }
  auto text = ReadTextArg(a.calib);
  if (!text.ok()) return ReportError(text.status());
  auto lm = LoadModelAndTokenizer(model_path, a.tokenizer, true);
  if (!lm.ok()) return ReportError(lm.status());
  const Model& model = *lm->model;
  const int32_t n_train = model.config.n_ctx_train;
  if (n_train > 0 && a.ctx > n_train) return ReportError(fmt::format("--ctx {} is beyond the trained context {}", a.ctx, n_train));
  // Chunks as llama-imatrix cuts them, so that both tools see the same
  // tokens: the text tokenized with the vocabulary's special tokens (BOS
  // first where it adds one), cut into whole chunks of ctx tokens, each
  // chunk's first token replaced by BOS. A short tail is dropped (it would
  // weigh its few tokens like the rest).
  const std::vector<int32_t> tokens = lm->tokenizer->Encode(*text, /*add_special=*/true, /*parse_special=*/false);
  const int32_t bos = lm->tokenizer->vocab().add_bos ? lm->tokenizer->vocab().bos : -1;
  std::vector<std::vector<int32_t>> chunks;
  for (size_t at = 0; at + static_cast<size_t>(a.ctx) <= tokens.size(); at += static_cast<size_t>(a.ctx)) {
    chunks.emplace_back(tokens.begin() + static_cast<std::ptrdiff_t>(at),
                        tokens.begin() + static_cast<std::ptrdiff_t>(at) + a.ctx);
    if (bos >= 0) chunks.back()[0] = bos;
  }
  if (chunks.empty()) {
    return ReportError(fmt::format("{} has {} tokens; --ctx {} needs at least {}", a.calib, tokens.size(), a.ctx,
                                   a.ctx));
  }
  if (a.chunks > 0 && static_cast<size_t>(a.chunks) < chunks.size()) chunks.resize(static_cast<size_t>(a.chunks));

  auto kernels = SelectKernels(rt);
  if (!kernels.ok()) return ReportError(kernels.status());
  auto cal = Calibrator::Create(model, *lm->tokenizer, *kernels, ResolveThreads(a.threads), a.ctx);
  if (!cal.ok()) return ReportError(cal.status());
  Imatrix im;
  ImatrixCollector collector(model.config, &im);
  const bool tty = isatty(fileno(stderr)) != 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (Status st = (*cal)->Run({chunks[i]}, &collector); !st.ok()) return ReportError(st);
    if (!collector.status().ok()) return ReportError(collector.status());
    if (tty) {
      std::fprintf(stderr, "\rimatrix: chunk %zu/%zu", i + 1, chunks.size());
    } else if ((i + 1) * 10 / chunks.size() != i * 10 / chunks.size()) {
      std::fprintf(stderr, "imatrix: chunk %zu/%zu\n", i + 1, chunks.size());  // a log: one line per 10 %
    }
  }
  if (tty) std::fputc('\n', stderr);
  im.datasets = {a.calib};
  im.chunk_count = static_cast<uint32_t>(chunks.size());
  im.chunk_size = static_cast<uint32_t>(a.ctx);
  if (im.entries.empty()) return ReportError("the model has no layer weights to collect an imatrix for");
  if (Status st = im.Save(a.out, legacy); !st.ok()) return ReportError(st);
  std::fprintf(stderr, "wrote %s (%s): %zu entries from %zu chunks of %d tokens\n", a.out.c_str(),
               legacy ? "legacy .dat" : "GGUF", im.entries.size(), chunks.size(), a.ctx);
  return kExitOk;
}

}  // namespace

CommandFn RegisterImatrix(CLI::App& app, const RuntimeOptions& rt) {
  auto a = std::make_shared<ImatrixArgs>();
  app.add_option("model_pos", a->positional, "MODEL (or -m)");
  app.add_option("-m,--model", a->model, "model (GGUF, HF folder or llama2.c checkpoint; default: the bundled model)");
  app.add_option("-f,--file", a->calib, "calibration text (- reads stdin)")->required();
  app.add_option("-o,--output", a->out, "output file (default imatrix.gguf; a .dat name writes the legacy format)");
  app.add_option("--output-format", a->format, "gguf or dat (default: by the output's extension)");
  app.add_option("--chunks", a->chunks, "use at most N chunks (default: all)");
  app.add_option("-c,--ctx", a->ctx, "tokens per chunk (default 512)");
  app.add_option("--tokenizer", a->tokenizer, "tokenizer (llama2.c checkpoints)");
  app.add_option("-t,--threads", a->threads, "threads (0: the cores this process may use)");
  return [a, &rt]() { return RunImatrix(*a, rt); };
}

}  // namespace infera::cli
