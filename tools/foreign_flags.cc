#include "tools/foreign_flags.h"

#include <algorithm>
#include <cstring>

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
    {"-nkvo --no-kv-offload", Action::kDrop, Value::kNone, nullptr,
     "the KV cache is always in main memory in infera; ignoring {}"},
    {"--numa", Action::kDrop, Value::kRequired, nullptr, "infera does not place memory by NUMA node; ignoring {}"},
    {"--jinja", Action::kDrop, Value::kNone, nullptr,
     "infera runs the model's Jinja chat template by default; ignoring {}"},
    {"-hf -hfr --hf-repo -hff --hf-file -mu --model-url", Action::kRefuse, Value::kRequired, nullptr,
     "{}: infera does not download models; download the GGUF file and pass --model PATH"},
    // vLLM flags for features that are always on.
    {"--enable-chunked-prefill", Action::kDrop, Value::kNone, nullptr,
     "chunked prefill is always on in infera; ignoring {}"},
    {"--enable-auto-tool-choice", Action::kDrop, Value::kNone, nullptr,
     "infera parses tool calls whenever a request has tools (--tool-call-parser picks the format); ignoring {}"},
};

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

}  // namespace

TranslatedArgs TranslateForeignFlags(const std::vector<std::string>& args) {
  TranslatedArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      out.args.insert(out.args.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    // --flag=value spellings.
    // (std::find, not arg.find('='): GCC 12 -O3 warns falsely of a memchr
    // overread [-Wstringop-overread] when find is inlined here.)
    const auto eq_at = std::find(arg.begin(), arg.end(), '=');
    const size_t eq = eq_at == arg.end() ? std::string::npos : static_cast<size_t>(eq_at - arg.begin());
    const std::string name = arg.rfind("--", 0) == 0 && eq != std::string::npos ? arg.substr(0, eq) : arg;
    const bool inline_value = name.size() != arg.size();
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
  return out;
}

}  // namespace infera::cli
