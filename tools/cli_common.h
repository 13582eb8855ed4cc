// Shared pieces of the infera subcommands: loading a model and its
// tokenizer, choosing the context size, and reporting errors the same way
// everywhere (one line on stderr, exit code 2 for bad input).
#pragma once

#include <memory>
#include <string>

#include "base/thread_pool.h"
#include "base/file_util.h"
#include "infera/engine.h"
#include "infera/status.h"
#include "kernels/kernels.h"
#include "model/loader.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace infera::cli {

constexpr int kExitOk = 0;
constexpr int kExitInternal = 1;
constexpr int kExitBadInput = 2;

// Prints "infera: error: <message>" and returns the exit code for `st`.
int ReportError(const Status& st);
int ReportError(const std::string& message);

struct RuntimeOptions {
  int threads = 0;            // 0: the usable cores (ThreadPool::DefaultThreadCount)
  std::string cpu_isa;        // "", "scalar", "avx2", "avx512"
  std::string attn_dtype = "f32";  // "f32" or "bf16": attention's products (KernelTable::attn_bf16)
  std::string matmul_dtype = "f32";  // "f32" or "bf16": float-weight matmuls' products (KernelTable::matmul_bf16)
};

// Kernel table for the requested (or best) ISA; logs the choice.
StatusOr<KernelTable> SelectKernels(const RuntimeOptions& opts);

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;  // may be null if need_tokenizer=false
};

// lo with the weights packed for kernel table k (ModelLoadOptions::kernel_isa)
// and, for bf16 products, float matrices stored as bf16.
inline ModelLoadOptions ForKernels(ModelLoadOptions lo, const KernelTable& k) {
  lo.kernel_isa = k.isa;
  lo.float_weights_bf16 = k.matmul_bf16;
  return lo;
}

// model_path empty: the bundled default model.
// A split model (--tp / --pp): `lo` names this rank's shard.
StatusOr<LoadedModel> LoadModelAndTokenizer(const std::string& model_path, const std::string& tokenizer_path,
                                            bool need_tokenizer, const ModelLoadOptions& lo = {});

// The model path a command uses: `model_path`, or the bundled default model
// when it is empty ("" when there is none).
std::string ModelPathOrDefault(const std::string& model_path);

// The text of a file argument; "-" reads standard input.
StatusOr<std::string> ReadTextArg(const std::string& path);

// Compute threads for a -t value: 0 means the cores this process may use
// (affinity and cgroup quota); more than that is capped, with a warning
// (oversubscribed threads wait on each other at every barrier).
int ResolveThreads(int requested);

// The chat template: `file` (--chat-template-file, a Jinja template) if
// given; else `name` (--chat-template: a built-in format, or "jinja" for the
// model's own template); else the model's Jinja template. A model template
// that does not parse warns and falls back to the built-in format it is
// recognized as; a model without one warns and uses the plain format.
StatusOr<ChatTemplate> ResolveChatTemplate(const Tokenizer& tok, const std::string& name,
                                           const std::string& file = "");
// The --chat-template help text.
extern const char kChatTemplateHelp[];

// Context size: `requested` if > 0, else the model's training context capped
// so that the f32 KV cache takes at most half of the available memory.
int32_t ChooseContextSize(const ModelConfig& c, int32_t requested);

// What one request produced, run alone to its end on `engine`.
struct RequestResult {
  std::vector<int32_t> tokens;
  std::vector<float> prompt_logits;  // [rows, n_vocab] from params.prompt_logits_from
  FinishReason finish = FinishReason::kNone;
};
// Adds the request and steps the engine until it ends; the engine must have no
// other work. A refused request or a failed step is an error.
StatusOr<RequestResult> RunRequest(Engine& engine, const std::vector<int32_t>& prompt, const RequestParams& params);

}  // namespace infera::cli
