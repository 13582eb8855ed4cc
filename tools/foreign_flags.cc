#include "tools/foreign_flags.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <fmt/format.h>

namespace infera::cli {
namespace {

enum class Action {
  kRename,  // replace the flag by `to`; its value (if any) follows as before
  kDrop,    // remove (with its value when `value` says so) and print `note`
  kRefuse,  // stop with `note` as the error
};
enum class Value { kNone, kRequired, kOptional };  // kOptional: only on/off/auto/0/1

struct ForeignFlag {
  const char* names;  // space-separated spellings
  Action action;
  Value value;
  const char* to;    // kRename: infera's flag
  const char* note;  // kDrop / kRefuse: what infera does instead
};

constexpr ForeignFlag kFlags[] = {
    // llama.cpp short flags of more than one letter.
    {"-np", Action::kRename, Value::kRequired, "--parallel", nullptr},
    {"-cd --ctx-size-draft", Action::kRename, Value::kRequired, "--draft-ctx", nullptr},
    {"-cnv --conversation", Action::kRename, Value::kNone, "-i", nullptr},
    {"-pg", Action::kRename, Value::kRequired, "--pg", nullptr},
    {"-jf --json-schema-file", Action::kRename, Value::kRequired, "--json-schema-file", nullptr},
    {"--keep", Action::kRename, Value::kRequired, "--context-keep", nullptr},
    {"--log-disable", Action::kRename, Value::kNone, "--log-level=off", nullptr},
    // llama-server's names for serve's options.
    {"-a --alias", Action::kRename, Value::kRequired, "--served-model-name", nullptr},
    {"--threads-http", Action::kRename, Value::kRequired, "--http-threads", nullptr},
    {"-to --timeout", Action::kRename, Value::kRequired, "--read-timeout", nullptr},
    {"--no-webui", Action::kRename, Value::kNone, "--no-web-ui", nullptr},
    {"--metrics", Action::kDrop, Value::kNone, nullptr,
     "infera always serves Prometheus metrics at /metrics; ignoring {}"},
    {"--slots --no-slots", Action::kDrop, Value::kNone, nullptr,
     "infera has no /slots endpoint (/metrics shows the running and waiting requests); ignoring {}"},
    {"--embedding --embeddings", Action::kDrop, Value::kNone, nullptr,
     "infera serves /v1/embeddings beside the completions; ignoring {}"},
    {"-dt --defrag-thold", Action::kDrop, Value::kRequired, nullptr,
     "infera's paged KV cache needs no defragmentation; ignoring {}"},
    {"--cache-reuse", Action::kDrop, Value::kRequired, nullptr,
     "infera reuses the KV blocks of shared prefixes (prefix caching, on by default); ignoring {}"},
    {"--rerank --reranking", Action::kRefuse, Value::kNone, nullptr, "{}: infera has no reranking endpoint"},
    {"-sys --system-prompt", Action::kRename, Value::kRequired, "--system", nullptr},
    {"-ngl --n-gpu-layers --gpu-layers", Action::kDrop, Value::kRequired, nullptr,
     "infera computes every layer on the CPU (no GPU offload); ignoring {}"},
    {"-fa --flash-attn", Action::kDrop, Value::kOptional, nullptr,
     "infera always uses its tiled (flash) attention; ignoring {}"},
    {"-cb --cont-batching", Action::kDrop, Value::kNone, nullptr,
     "continuous batching is always on in infera; ignoring {}"},
    {"--mlock --no-mmap --mmap", Action::kDrop, Value::kNone, nullptr,
     "infera maps the model file and repacks its weights at load; ignoring {}"},
    {"-ub --ubatch-size", Action::kDrop, Value::kRequired, nullptr,
     "infera sizes its compute batches itself (-b / --max-batched-tokens set the batch); ignoring {}"},
    {"-dev --device -sm --split-mode -ts --tensor-split -mg --main-gpu", Action::kDrop, Value::kRequired, nullptr,
     "infera runs on the CPU; ignoring {}"},
    {"-nkvo --no-kv-offload", Action::kDrop, Value::kOptional, nullptr,
     "the KV cache is always in main memory in infera; ignoring {}"},
    {"-tb --threads-batch", Action::kDrop, Value::kRequired, nullptr,
     "infera uses --threads for prompt processing and generation alike; ignoring {}"},
    {"-co --color", Action::kDrop, Value::kOptional, nullptr, "infera writes plain text; ignoring {}"},
    {"-no-cnv --no-conversation", Action::kDrop, Value::kNone, nullptr,
     "infera run generates once and exits unless -i is given; ignoring {}"},
    {"--no-warmup", Action::kDrop, Value::kNone, nullptr,
     "infera run has no warm-up pass (bench always warms up); ignoring {}"},
    {"--no-escape", Action::kDrop, Value::kNone, nullptr,
     "infera takes the prompt as written unless -e is given; ignoring {}"},
    {"-r --reverse-prompt", Action::kRename, Value::kRequired, "--stop", nullptr},
    {"-v --verbose", Action::kRename, Value::kNone, "--log-level=debug", nullptr},
    {"-mmp", Action::kDrop, Value::kRequired, nullptr,
     "infera maps the model file and repacks its weights at load; ignoring {}"},
    {"--progress", Action::kDrop, Value::kNone, nullptr, "infera bench prints each test as it ends; ignoring {}"},
    {"--allow-requantize", Action::kDrop, Value::kNone, nullptr,
     "infera quantize requantizes a quantized input (from its dequantized values) without being asked; ignoring {}"},
    {"--keep-split", Action::kDrop, Value::kNone, nullptr, "infera quantize writes one file; ignoring {}"},
    {"--numa", Action::kDrop, Value::kRequired, nullptr, "infera does not place memory by NUMA node; ignoring {}"},
    {"--jinja", Action::kDrop, Value::kNone, nullptr,
     "infera runs the model's Jinja chat template by default; ignoring {}"},
    {"-hf -hfr --hf-repo -hff --hf-file -mu --model-url", Action::kRefuse, Value::kRequired, nullptr,
     "{}: infera does not download models; download the GGUF file and pass --model PATH"},
    // vLLM flags for features that are always on.
    {"--enable-chunked-prefill", Action::kDrop, Value::kNone, nullptr,
     "chunked prefill is always on in infera; ignoring {}"},
    {"--gpu-memory-utilization", Action::kDrop, Value::kRequired, nullptr,
     "infera runs on the CPU (--kv-cache-mb sizes the KV cache); ignoring {}"},
    {"--trust-remote-code", Action::kDrop, Value::kNone, nullptr,
     "infera runs no code from a model folder (its families are built in); ignoring {}"},
    {"--dtype", Action::kDrop, Value::kRequired, nullptr,
     "infera keeps the file's weight types and computes in f32 (--matmul-dtype bf16 for bf16 products); ignoring {}"},
    {"--disable-log-requests", Action::kRename, Value::kNone, "--log-sample=0", nullptr},
    {"--enforce-eager", Action::kDrop, Value::kNone, nullptr, "infera has no CUDA graphs to turn off; ignoring {}"},
    {"--enable-lora", Action::kDrop, Value::kNone, nullptr,
     "LoRA is on whenever --lora / --lora-modules load adapters; ignoring {}"},
    {"--max-loras --max-lora-rank --max-cpu-loras", Action::kDrop, Value::kRequired, nullptr,
     "infera keeps every adapter given loaded, of any rank (--max-runtime-loras N: slots for adapters loaded "
     "at run time); ignoring {}"},
    {"--swap-space", Action::kDrop, Value::kRequired, nullptr,
     "infera preempts by recomputing, with no CPU swap space; ignoring {}"},
    {"--disable-log-stats", Action::kDrop, Value::kNone, nullptr,
     "infera logs no periodic stats (they are at /metrics); ignoring {}"},
    {"--uvicorn-log-level", Action::kDrop, Value::kRequired, nullptr, "--log-level sets infera's logging; ignoring {}"},
    {"--max-logprobs", Action::kDrop, Value::kRequired, nullptr,
     "infera returns up to 20 top log-probabilities, as OpenAI; ignoring {}"},
    {"--load-format --download-dir", Action::kDrop, Value::kRequired, nullptr,
     "infera reads the model file or folder it is given; ignoring {}"},
    {"-q --quantization", Action::kDrop, Value::kRequired, nullptr,
     "infera reads the quantization from the model file; ignoring {}"},
    {"--enable-auto-tool-choice", Action::kDrop, Value::kNone, nullptr,
     "infera parses tool calls whenever a request has tools (--tool-call-parser picks the format); ignoring {}"},
};

// llama.cpp samplers infera does not have. The switch of each is accepted
// with its "off" value (a script may spell out the default) and refused with
// any other; its parameters are dropped with a note.
struct ForeignSampler {
  const char* names;
  const char* sampler;
  const char* off;  // the numeric value that leaves it off; null: a parameter of the sampler
};

constexpr ForeignSampler kSamplers[] = {
    {"--mirostat", "mirostat", "0"},
    {"--mirostat-lr --mirostat-ent", "mirostat", nullptr},
    {"--typical --typical-p", "locally typical", "1"},
    {"--dry-multiplier", "DRY", "0"},
    {"--dry-base --dry-allowed-length --dry-penalty-last-n --dry-sequence-breaker", "DRY", nullptr},
    {"--xtc-probability", "XTC", "0"},
    {"--xtc-threshold", "XTC", nullptr},
    {"--top-nsigma --top-n-sigma", "top-n-sigma", "-1"},
    {"--dynatemp-range", "dynamic temperature", "0"},
    {"--dynatemp-exp", "dynamic temperature", nullptr},
};

// llama.cpp's K and V cache types (-ctk / -ctv), which infera keeps as one
// (--kv-cache-type). Its type for a llama.cpp name, or null.
const char* InferaKvType(const std::string& v) {
  if (v == "f32") return "f32";
  if (v == "bf16") return "bf16";
  if (v == "q8_0") return "q8";
  return nullptr;
}

bool HasName(const char* names, const std::string& arg) {
  const size_t n = std::strlen(names);
  size_t pos = 0;
  while (pos < n) {
    size_t end = pos;
    while (end < n && names[end] != ' ') ++end;
    if (arg.size() == end - pos && arg.compare(0, arg.size(), names + pos, end - pos) == 0) return true;
    pos = end + 1;
  }
  return false;
}

bool IsOnOff(const std::string& v) { return v == "on" || v == "off" || v == "auto" || v == "0" || v == "1"; }

// True if `v` is a number equal to `off` ("0", "0.0", "1.00", ...).
bool IsOffValue(const std::string& v, const char* off) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  return !v.empty() && end == v.c_str() + v.size() && x == std::strtod(off, nullptr);
}

constexpr const char kInferaSamplers[] =
    "infera's samplers are temperature, top-k, top-p, min-p and the repeat / presence / frequency penalties";

}  // namespace

TranslatedArgs TranslateForeignFlags(const std::vector<std::string>& args,
                                     const std::function<bool(const std::string&)>& is_own) {
  TranslatedArgs out;
  // -ctk / -ctv: the one type they give, the first one's spelling, and where
  // its --kv-cache-type goes.
  std::string kv_type, kv_flag;
  size_t kv_at = 0;
  size_t end = args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      end = i;
      break;
    }
    // --flag=value spellings.
    // (std::find, not arg.find('='): GCC 12 -O3 warns falsely of a memchr
    // overread [-Wstringop-overread] when find is inlined here.)
    const auto eq_at = std::find(arg.begin(), arg.end(), '=');
    const size_t eq = eq_at == arg.end() ? std::string::npos : static_cast<size_t>(eq_at - arg.begin());
    const std::string name = arg.rfind("--", 0) == 0 && eq != std::string::npos ? arg.substr(0, eq) : arg;
    const bool inline_value = name.size() != arg.size();
    if (is_own && arg.size() > 1 && arg[0] == '-' && is_own(name)) {
      out.args.push_back(arg);
      continue;
    }
    // Takes the flag's value (after '=', or the next argument); nullopt with
    // out.error set when there is none.
    auto take_value = [&](const char* what) -> std::optional<std::string> {
      if (inline_value) return arg.substr(eq + 1);
      if (i + 1 >= args.size()) {
        out.error = fmt::format("{} needs {}", arg, what);
        return std::nullopt;
      }
      return args[++i];
    };
    if (name == "--kv-cache-dtype") {  // vLLM's: auto (the model's type; here f32), bfloat16, fp8*
      const std::optional<std::string> value = take_value("a cache type");
      if (!value) return out;
      if (*value == "auto") {
        out.notes.push_back(fmt::format(
            "infera's KV cache is f32 unless --kv-cache-type says otherwise; ignoring {} {}", name, *value));
        continue;
      }
      if (*value != "bfloat16") {
        out.error = fmt::format(
            "{} {}: infera's KV cache types are f32, bf16 (--kv-cache-type bf16, vLLM's bfloat16) "
            "and q8 (int8 with a scale per token and KV head: its 8-bit type)",
            name, *value);
        return out;
      }
      if (!kv_type.empty() && kv_type != "bf16") {
        out.error = fmt::format("{} and {} {} differ", kv_flag, name, *value);
        return out;
      }
      if (kv_type.empty()) {
        kv_type = "bf16";
        kv_flag = name + " " + *value;
        kv_at = out.args.size();
      }
      continue;
    }
    if (name == "-ctk" || name == "--cache-type-k" || name == "-ctv" || name == "--cache-type-v") {
      const std::optional<std::string> value = take_value("a cache type");
      if (!value) return out;
      const std::string& v = *value;
      const char* t = InferaKvType(v);
      if (t == nullptr) {
        out.error = fmt::format(
            "{} {}: infera's KV cache types are f32, bf16 (half the memory, as f16 would take) and q8_0 "
            "(--kv-cache-type f32|bf16|q8)",
            name, v);
        return out;
      }
      if (!kv_type.empty() && kv_type != t) {
        out.error =
            fmt::format("{} and {} {} differ: infera keeps K and V in one type (--kv-cache-type)", kv_flag, name, v);
        return out;
      }
      if (kv_type.empty()) {
        kv_type = t;
        kv_flag = name + " " + v;
        kv_at = out.args.size();
      }
      continue;
    }
    const ForeignSampler* sampler = nullptr;
    for (const ForeignSampler& candidate : kSamplers) {
      if (HasName(candidate.names, name)) sampler = &candidate;
    }
    if (sampler != nullptr) {
      const std::optional<std::string> value = take_value("a value");
      if (!value) return out;
      const std::string& v = *value;
      if (sampler->off == nullptr || IsOffValue(v, sampler->off)) {
        out.notes.push_back(fmt::format("infera has no {} sampler; ignoring {} {}", sampler->sampler, name, v));
        continue;
      }
      out.error = fmt::format("{} {}: infera has no {} sampler ({})", name, v, sampler->sampler, kInferaSamplers);
      return out;
    }
    const ForeignFlag* f = nullptr;
    for (const ForeignFlag& candidate : kFlags) {
      if (HasName(candidate.names, name)) f = &candidate;
    }
    if (f == nullptr) {
      out.args.push_back(arg);
      continue;
    }
    std::string shown = arg;
    bool takes_next = false;
    if (!inline_value && i + 1 < args.size()) {
      takes_next = f->value == Value::kRequired || (f->value == Value::kOptional && IsOnOff(args[i + 1]));
    }
    if (takes_next) shown += " " + args[i + 1];
    switch (f->action) {
      case Action::kRename:
        out.args.push_back(inline_value ? std::string(f->to) + arg.substr(eq) : std::string(f->to));
        break;
      case Action::kDrop:
        out.notes.push_back(fmt::format(fmt::runtime(f->note), shown));
        if (takes_next) ++i;
        break;
      case Action::kRefuse:
        out.error = fmt::format(fmt::runtime(f->note), shown);
        return out;
    }
  }
  if (!kv_type.empty()) {
    const auto at = out.args.begin() + static_cast<std::ptrdiff_t>(kv_at);
    out.args.insert(out.args.insert(at, kv_type), "--kv-cache-type");
  }
  out.args.insert(out.args.end(), args.begin() + static_cast<std::ptrdiff_t>(end), args.end());
  return out;
}

}  // namespace infera::cli
