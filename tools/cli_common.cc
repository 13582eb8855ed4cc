#include "tools/cli_common.h"

#include <cstdio>
#include <fstream>

#include "attention/kv_storage.h"
#include "base/check.h"
#include "base/file_util.h"
#include "base/logging.h"
#include "base/output_file.h"
#include "base/paths.h"
#include "model/loader.h"
#include "tokenizer/loader.h"

namespace infera::cli {

int ReportError(const std::string& message) {
  std::string m = message;
  for (char& c : m) if (c == '\n') c = ' ';
  std::fprintf(stderr, "infera: error: %s\n", m.c_str());
  return kExitBadInput;
}

int ReportError(const Status& st) {
  ReportError(st.message());
  return st.code() == StatusCode::kInternal ? kExitInternal : kExitBadInput;
}

StatusOr<KernelTable> SelectKernels(const RuntimeOptions& opts) {
  const CpuFeatures f = DetectCpuFeatures();
  CpuIsa isa = f.BestIsa();
  if (!opts.cpu_isa.empty()) {
    CpuIsa want;
    if (!ParseCpuIsa(opts.cpu_isa, &want)) return InvalidArgument("--cpu-isa must be scalar, avx2, avx512 or amx");
    if (static_cast<int>(want) > static_cast<int>(f.MaxIsa())) {
      return InvalidArgument(std::string("--cpu-isa ") + opts.cpu_isa + " is not supported by this CPU");
    }
    isa = want;
  }
  if (opts.attn_dtype != "f32" && opts.attn_dtype != "bf16") return InvalidArgument("--attn-dtype must be f32 or bf16");
  if (opts.matmul_dtype != "f32" && opts.matmul_dtype != "bf16") {
    return InvalidArgument("--matmul-dtype must be f32 or bf16");
  }
  KernelTable k = MakeKernelTable(isa);
  if (k.isa != isa && isa == CpuIsa::kAmx) {
    return InvalidArgument("--cpu-isa amx: Linux refused this process the AMX tile-data permission");
  }
  k.attn_bf16 = opts.attn_dtype == "bf16";
  k.matmul_bf16 = opts.matmul_dtype == "bf16";
  LOG_INFO("cpu: {} | features: {} | kernels: {}, quantized: {}{}{}, attention: {}{}{}", CpuModelName(), f.ToString(),
           CpuIsaName(k.isa), k.qgemm_variant, k.qgemm_tile16 != nullptr ? ", prefill tiles: " : "",
           k.qgemm_tile16 != nullptr ? k.qgemm_tile16_variant : "", k.attn_bf16 ? k.flash_bf16_variant : k.flash_variant,
           k.matmul_bf16 ? ", float matmuls: " : "", k.matmul_bf16 ? k.matmul_bf16_variant : "");
  const bool bf16_kernels = f.avx512bf16 && k.isa >= CpuIsa::kAvx512;
  if (k.attn_bf16 && !bf16_kernels) {
    LOG_WARN("--attn-dtype bf16 without AVX512-BF16 kernels: the bf16 arithmetic is emulated, slower than f32");
  }
  if (k.matmul_bf16 && !bf16_kernels) {
    LOG_WARN("--matmul-dtype bf16 without AVX512-BF16 kernels: float matmuls run the scalar definition, far slower");
  }
  return k;
}

StatusOr<LoadedModel> LoadModelAndTokenizer(const std::string& model_path, const std::string& tokenizer_path,
                                            bool need_tokenizer, const ModelLoadOptions& lo) {
  std::string path = model_path;
  if (path.empty()) {
    ASSIGN_OR_RETURN(path, FindDefaultModel());
    LOG_INFO("using the bundled default model {}", path);
  }
  LoadedModel lm;
  ASSIGN_OR_RETURN(lm.model, LoadModel(path, lo));
  const ModelConfig& c = lm.model->whole();
  const ModelWeights& w = *lm.model->weights;
  LOG_INFO("model: {} ({}, {}), {} layers, {} embd, {} heads ({} kv), vocab {}; weights resident {:.1f} MiB "
           "({:.3f}x the file's tensors)", path, ArchName(c.arch), lm.model->weight_type_summary, c.n_layer, c.n_embd,
           c.n_head, c.n_head_kv, c.n_vocab, w.resident_bytes() / 1048576.0, w.resident_ratio());
  if (lm.model->shard.split()) {
    LOG_INFO("parallel: {}; weights resident {:.1f} MiB", DescribeShard(c, lm.model->shard),
             w.resident_bytes() / 1048576.0);
  }
  if (!tokenizer_path.empty()) {
    auto t = TokenizerFromFile(tokenizer_path, c.n_vocab);
    if (!t.ok()) return t.status();
    lm.tokenizer = std::move(t).value();
  } else if (lm.model->gguf) {
    auto t = TokenizerFromGguf(*lm.model->gguf);
    if (!t.ok() && need_tokenizer) return t.status();
    if (t.ok()) lm.tokenizer = std::move(t).value();
  } else if (lm.model->format == ModelFormat::kSafetensors) {
    auto t = TokenizerFromFile(lm.model->path, c.n_vocab);  // tokenizer.json / tokenizer.model / vocab.json
    if (!t.ok() && need_tokenizer) return t.status();
    if (t.ok()) lm.tokenizer = std::move(t).value();
  } else if (need_tokenizer) {
    return InvalidArgument(path + ": llama2.c checkpoints need --tokenizer PATH (the tokenizer .bin)");
  }
  if (lm.tokenizer && lm.tokenizer->n_vocab() != c.n_vocab) {
    if (lm.tokenizer->n_vocab() > c.n_vocab) {
      return InvalidArgument("tokenizer has " + std::to_string(lm.tokenizer->n_vocab()) + " tokens but the model only " +
                             std::to_string(c.n_vocab));
    }
    LOG_WARN("tokenizer has {} tokens, model {}", lm.tokenizer->n_vocab(), c.n_vocab);
  }
  return lm;
}

std::string ModelPathOrDefault(const std::string& model_path) {
  if (!model_path.empty()) return model_path;
  auto found = FindDefaultModel();
  return found.ok() ? *found : std::string();
}

StatusOr<std::string> ReadTextArg(const std::string& path) {
  if (path != "-") return ReadFileToString(path);
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), stdin)) > 0) text.append(buf, n);
  if (std::ferror(stdin)) return InvalidArgument("cannot read standard input");
  return text;
}

int ResolveThreads(int requested) {
  const int available = ThreadPool::DefaultThreadCount();
  if (requested <= 0) return available;
  if (requested > available) {
    std::fprintf(stderr, "infera: warning: -t %d is more than the %d cores available to this process; using %d\n",
                 requested, available, available);
    return available;
  }
  return requested;
}

const char kChatTemplateHelp[] =
    "chat template: jinja (the model's own, the default), or a built-in format: chatml, qwen3, llama2, llama3, "
    "mistral, phi3, zephyr, tulu, gemma, plain";

StatusOr<ChatTemplate> ResolveChatTemplate(const Tokenizer& tok, const std::string& name, const std::string& file) {
  const std::string& model_template = tok.vocab().chat_template;
  if (!file.empty()) {
    if (!name.empty()) return InvalidArgument("--chat-template and --chat-template-file are exclusive");
    ASSIGN_OR_RETURN(std::string source, ReadFileToString(file));
    auto t = ChatTemplate::FromJinja(source);
    if (!t.ok()) return InvalidArgument(fmt::format("--chat-template-file {}: {}", file, t.status().message()));
    return t;
  }
  if (!name.empty() && name != "jinja") {
    ChatFormat fmt = ChatFormat::kPlain;
    if (!ParseChatFormat(name, &fmt)) {
      return InvalidArgument(fmt::format("--chat-template must be jinja or one of plain, chatml, qwen3, llama2, llama3, "
                                         "mistral, phi3, zephyr, tulu, gemma (got '{}')", name));
    }
    return ChatTemplate(fmt);
  }
  if (model_template.empty()) {
    if (name == "jinja") return InvalidArgument("--chat-template jinja: the model has no chat template");
    LOG_WARN("the model has no chat template; chats use a plain 'User:/Assistant:' format (--chat-template NAME "
             "picks a built-in one, --chat-template-file a Jinja file)");
    return ChatTemplate();
  }
  auto t = ChatTemplate::FromJinja(model_template);
  if (t.ok()) return t;
  if (name == "jinja") return InvalidArgument(fmt::format("the model's {}", t.status().message()));
  bool known = false;
  const ChatFormat fmt = DetectChatFormat(model_template, &known);
  LOG_WARN("the model's {}; using the built-in '{}' format instead", t.status().message(), ChatFormatName(fmt));
  return ChatTemplate(fmt);
}

int32_t ChooseContextSize(const ModelConfig& c, int32_t requested) {
  if (requested > 0) return requested;
  const uint64_t per_token = KvStorage::BytesFor(c.KvHeadsPerLayer(), 1, c.head_dim);
  const uint64_t budget = AvailableMemoryBytes() / 2;
  const uint64_t cap = std::max<uint64_t>(256, budget / per_token);
  return static_cast<int32_t>(std::min<uint64_t>(c.n_ctx_train, cap));
}

StatusOr<RequestResult> RunRequest(Engine& engine, const std::vector<int32_t>& prompt, const RequestParams& params) {
  CHECK(!engine.HasWork());
  RETURN_IF_ERROR(engine.Add(prompt, params).status());
  RequestResult res;
  while (engine.HasWork()) {
    for (RequestOutput& o : engine.Step()) {
      if (o.finish_reason == FinishReason::kError) return Internal(o.error);
      res.tokens.insert(res.tokens.end(), o.tokens.begin(), o.tokens.end());
      res.prompt_logits.insert(res.prompt_logits.end(), o.prompt_logits.begin(), o.prompt_logits.end());
      if (o.finished) res.finish = o.finish_reason;
    }
  }
  return res;
}

}  // namespace infera::cli
