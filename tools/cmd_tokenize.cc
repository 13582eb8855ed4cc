// infera tokenize / eval-logits: inspection aids used by tests and users.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <cstring>
#include <sstream>

#include <fmt/format.h>

#include "base/file_util.h"
#include "base/output_file.h"
#include "formats/gguf_reader.h"
#include "infera/engine.h"
#include "tensor/quant_blocks.h"
#include "tokenizer/loader.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"

namespace infera::cli {
namespace {

// Parses space-separated token ids; an error message if anything else is in
// the text or an id does not fit a token id (never wrapped: 4294967297 is not 1).
std::string ParseIds(const std::string& text, const char* what, std::vector<int32_t>* ids) {
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(word.c_str(), &end, 10);
    if (end == word.c_str() || *end != '\0') return fmt::format("{} must be space-separated integers (got '{}')", what, word);
    if (errno == ERANGE || v < 0 || v > std::numeric_limits<int32_t>::max()) {
      return fmt::format("token id {} is out of range", word);
    }
    ids->push_back(static_cast<int32_t>(v));
  }
  return {};
}

struct TokenizeArgs {
  std::string model, text, file, pre, split;
  bool pieces = false, add_special = false, parse_special = false;
};

int Tokenize(const TokenizeArgs& a) {
  if (a.model.empty()) return ReportError("--model is required");
  std::string text = a.text;
  if (!a.file.empty()) {
    auto t = ReadFileToString(a.file);
    if (!t.ok()) return ReportError(t.status());
    text = *t;
  }
  auto tok = TokenizerFromFile(a.model, -1, a.pre);
  if (!tok.ok()) return ReportError(tok.status());
  // --split SEP: tokenize each SEP-separated piece, one output line each.
  std::vector<std::string> texts;
  if (a.split.empty()) {
    texts.push_back(text);
  } else {
    size_t pos = 0;
    for (size_t next; (next = text.find(a.split, pos)) != std::string::npos; pos = next + a.split.size()) {
      texts.push_back(text.substr(pos, next - pos));
    }
    if (pos < text.size()) texts.push_back(text.substr(pos));
  }
  for (const auto& t : texts) {
    const auto ids = (*tok)->Encode(t, a.add_special, a.parse_special);
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ' ';
      out += std::to_string(ids[i]);
      if (a.pieces) out += ":'" + (*tok)->TokenToPiece(ids[i], true) + "'";
    }
    std::printf("%s\n", out.c_str());
  }
  return kExitOk;
}

struct DumpTensorArgs {
  std::string model, tensor, out;
};

// Writes one tensor of a GGUF file, dequantized to f32, as raw floats.
int DumpTensor(const DumpTensorArgs& a) {
  if (Status st = CheckOutputNotInput(a.out, {a.model}); !st.ok()) return ReportError(st);
  auto f = GgufFile::Open(a.model);
  if (!f.ok()) return ReportError(f.status());
  const TensorView* t = (*f)->FindTensor(a.tensor);
  if (t == nullptr) return ReportError(a.model + ": no tensor '" + a.tensor + "'");
  if (!CanDequantize(t->type)) return ReportError(std::string("cannot dequantize type ") + DTypeName(t->type));
  const int64_t n = t->NumElements();
  std::vector<float> out(n);
  const int64_t row = t->ne[0];
  const uint64_t row_bytes = *RowBytes(t->type, row);
  for (int64_t r = 0; r < n / row; ++r) DequantizeRow(t->type, t->data + r * row_bytes, out.data() + r * row, row);
  std::string bytes(reinterpret_cast<const char*>(out.data()), out.size() * sizeof(float));
  if (Status st = WriteStringToFile(a.out, bytes); !st.ok()) return ReportError(st);
  return kExitOk;
}

struct DetokenizeArgs {
  std::string model, ids, file, split, pre;
  bool ids_given = false;  // the positional ids, possibly an empty list
  bool special = false;
};

// Decodes `ids` (one space-separated id list) or, with --file, each line of
// the file as its own list: the text of each, followed by --split's separator
// (default a newline). One process for many lists (tokenizer test vectors).
int Detokenize(const DetokenizeArgs& a) {
  if (a.ids_given == !a.file.empty()) return ReportError("give either ids or --file (one id list per line)");
  std::vector<std::string> lists;
  if (a.file.empty()) {
    lists.push_back(a.ids);
  } else {
    auto t = ReadFileToString(a.file);
    if (!t.ok()) return ReportError(t.status());
    std::istringstream in(*t);
    for (std::string line; std::getline(in, line);) lists.push_back(line);
  }
  std::vector<std::vector<int32_t>> all(lists.size());
  for (size_t i = 0; i < lists.size(); ++i) {
    const std::string what = a.file.empty() ? std::string("ids") : fmt::format("{} line {}: ids", a.file, i + 1);
    if (std::string e = ParseIds(lists[i], what.c_str(), &all[i]); !e.empty()) return ReportError(e);
  }
  auto tok = TokenizerFromFile(a.model, -1, a.pre);
  if (!tok.ok()) return ReportError(tok.status());
  for (const std::vector<int32_t>& ids : all) {
    for (int32_t id : ids) {
      if (id >= (*tok)->n_vocab()) {
        return ReportError(fmt::format("token id {} is out of range [0, {})", id, (*tok)->n_vocab()));
      }
    }
  }
  const std::string sep = a.split.empty() ? std::string("\n") : a.split;
  for (const std::vector<int32_t>& ids : all) {
    const std::string text = (*tok)->Decode(ids, a.special);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fwrite(sep.data(), 1, sep.size(), stdout);
  }
  return kExitOk;
}

struct EvalArgs {
  std::string model, tokens, out, mode = "full";
  int threads = 0;
  int32_t greedy = 0;
  LoraFlags lora;
};

// Prints (or writes as raw f32) the logits at every position of a token
// sequence, computed in one batch ("full"), one token at a time
// ("incremental"), or in chunks of N ("chunk:N").
int EvalLogits(const EvalArgs& a, const RuntimeOptions& rt) {
  std::vector<int32_t> ids;
  if (std::string e = ParseIds(a.tokens, "--tokens", &ids); !e.empty()) return ReportError(e);
  if (ids.empty()) return ReportError("--tokens is empty");
  if (!a.out.empty()) {
    if (Status st = CheckOutputNotInput(a.out, {ModelPathOrDefault(a.model)}); !st.ok()) return ReportError(st);
  }
  int32_t chunk = 0;
  if (a.mode == "full") chunk = static_cast<int32_t>(ids.size());
  else if (a.mode == "incremental") chunk = 1;
  else if (a.mode.rfind("chunk:", 0) == 0) chunk = std::atoi(a.mode.c_str() + 6);
  if (chunk <= 0) return ReportError("--mode must be full, incremental or chunk:N");
  auto kernels = SelectKernels(rt);
  if (!kernels.ok()) return ReportError(kernels.status());
  auto lm = LoadModelAndTokenizer(a.model, "", false, ForKernels({}, *kernels));
  if (!lm.ok()) return ReportError(lm.status());
  if (a.greedy < 0) return ReportError("--greedy must be >= 0");
  // The serving engine with one sequence, `chunk` tokens per step.
  EngineOptions eo;
  eo.threads = ResolveThreads(a.threads);
  eo.max_num_seqs = 1;
  eo.max_batched_tokens = chunk;
  eo.max_model_len = static_cast<int32_t>(ids.size()) + a.greedy;
  eo.prefix_caching = false;
  auto lora = LoadLoraAdapters(a.lora, *lm->model, &eo);
  if (!lora.ok()) return ReportError(lora.status());
  auto engine = Engine::Create(*lm->model, nullptr, *kernels, eo);
  if (!engine.ok()) return ReportError(engine.status());
  RequestParams rp;
  rp.sampling.temperature = 0;
  rp.ignore_eos = true;
  rp.max_tokens = a.greedy;
  if (a.greedy == 0) rp.prompt_logits_from = 0;
  auto res = RunRequest(**engine, ids, rp);
  if (!res.ok()) return ReportError(res.status());
  if (a.greedy > 0) {
    std::string line;
    for (int32_t t : res->tokens) line += (line.empty() ? "" : " ") + std::to_string(t);
    std::printf("%s\n", line.c_str());
    return kExitOk;
  }
  const std::vector<float>& logits = res->prompt_logits;
  if (!a.out.empty()) {
    std::string bytes(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float));
    if (Status st = WriteStringToFile(a.out, bytes); !st.ok()) return ReportError(st);
    return kExitOk;
  }
  const int32_t V = lm->model->config.n_vocab;
  for (size_t t = 0; t < ids.size(); ++t) {
    int32_t best = 0;
    for (int32_t i = 1; i < V; ++i) if (logits[t * V + i] > logits[t * V + best]) best = i;
    std::printf("%zu argmax %d logit %.6f\n", t, best, logits[t * V + best]);
  }
  return kExitOk;
}

}  // namespace

CommandFn RegisterTokenize(CLI::App& app, const RuntimeOptions&) {
  auto a = std::make_shared<TokenizeArgs>();
  app.add_option("-m,--model", a->model, "GGUF (vocab-only is fine), tokenizer.json, vocab.json, tokenizer.model, tiktoken or llama2.c file, or a model folder")->required();
  app.add_option("text", a->text, "text to tokenize");
  app.add_option("--file", a->file, "read the text from a file");
  app.add_option("--pre", a->pre, "pre-tokenizer for byte-level BPE files that do not name one (llama3, qwen2, gpt2, ...)");
  app.add_option("--split", a->split, "tokenize each SEP-separated part of the text; one line of ids per part");
  app.add_flag("--pieces", a->pieces, "print each token's piece too");
  app.add_flag("--add-special", a->add_special, "add BOS/EOS as the model does");
  app.add_flag("--parse-special", a->parse_special, "recognize special-token text");
  return [a]() { return Tokenize(*a); };
}

CommandFn RegisterDumpTensor(CLI::App& app, const RuntimeOptions&) {
  auto a = std::make_shared<DumpTensorArgs>();
  app.add_option("-m,--model", a->model, "GGUF file")->required();
  app.add_option("--tensor", a->tensor, "tensor name")->required();
  app.add_option("--out", a->out, "output file (raw f32)")->required();
  return [a]() { return DumpTensor(*a); };
}

CommandFn RegisterDetokenize(CLI::App& app, const RuntimeOptions&) {
  auto a = std::make_shared<DetokenizeArgs>();
  app.add_option("-m,--model", a->model, "tokenizer file or model (as for tokenize)")->required();
  CLI::Option* ids = app.add_option("ids", a->ids, "space-separated token ids");
  app.add_option("--file", a->file, "decode each line of this file (space-separated ids) instead");
  app.add_option("--split", a->split, "print SEP after each decoded text instead of a newline");
  app.add_option("--pre", a->pre, "pre-tokenizer name (byte-level BPE files)");
  app.add_flag("--special", a->special, "render special tokens as text");
  return [a, ids]() {
    a->ids_given = ids->count() > 0;
    return Detokenize(*a);
  };
}

CommandFn RegisterEvalLogits(CLI::App& app, const RuntimeOptions& rt) {
  auto a = std::make_shared<EvalArgs>();
  app.add_option("-m,--model", a->model, "model");
  app.add_option("--tokens", a->tokens, "space-separated token ids")->required();
  app.add_option("--mode", a->mode, "full, incremental or chunk:N");
  app.add_option("--out", a->out, "write logits [n_tokens, n_vocab] as raw f32 to this file");
  app.add_option("-t,--threads", a->threads, "threads (0: the cores this process may use; more is capped)");
  app.add_option("--greedy", a->greedy, "instead: generate N tokens greedily after the given ones and print their ids");
  AddLoraFlags(app, &a->lora, /*with_modules=*/false);
  return [a, &rt]() { return EvalLogits(*a, rt); };
}

}  // namespace infera::cli
