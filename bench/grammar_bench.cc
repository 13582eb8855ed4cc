// Cost of constrained decoding per generated token: a JSON object decoded
// token by token under JSON mode (the grammar mask before each token, the
// advance after it), for real vocabularies of 4k to 65k tokens. A fresh
// constraint per iteration, so the per-state cache starts cold as in a
// request. Run: build/bench/grammar_bench [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/paths.h"
#include "formats/gguf_reader.h"
#include "sampling/grammar_constraint.h"
#include "server/output_constraints.h"
#include "tokenizer/loader.h"

namespace infera {
namespace {

constexpr char kText[] =
    R"({"name": "Moses", "age": 120, "tags": ["law", "exodus", "sinai"], "note": "In the beginning God created )"
    R"(the heaven and the earth.", "kin": {"brother": "Aaron", "sister": "Miriam"}, "ok": true})";

struct Vocab {
  std::unique_ptr<Tokenizer> tok;
  std::shared_ptr<const VocabTrie> trie;
  std::vector<int32_t> ids;  // kText's tokens
};

Vocab Load(const std::string& path) {
  Vocab v;
  auto g = GgufFile::Open(path);
  if (!g.ok()) return v;
  auto t = TokenizerFromGguf(**g);
  if (!t.ok()) return v;
  v.tok = std::move(t).value();
  std::vector<std::string> pieces(v.tok->n_vocab());
  for (int32_t id = 0; id < v.tok->n_vocab(); ++id) pieces[id] = v.tok->TokenToPiece(id);
  v.trie = std::make_shared<const VocabTrie>(std::move(pieces));
  v.ids = v.tok->Encode(kText, /*add_special=*/false, /*parse_special=*/false);
  return v;
}

void BM_JsonModeMask(benchmark::State& state, std::string path) {
  static std::map<std::string, Vocab> vocabs;
  if (!vocabs.count(path)) vocabs[path] = Load(path);
  const Vocab& v = vocabs[path];
  if (!v.tok) {
    state.SkipWithError(("cannot load " + path).c_str());
    return;
  }
  auto grammar = Grammar::Parse(server::kJsonObjectGbnf);
  const int32_t V = v.tok->n_vocab();
  std::vector<float> logits(V);
  int64_t tokens = 0;
  for (auto _ : state) {
    // (SentencePiece vocabularies encode the text's start with their dummy
    // prefix space, which decoding drops: strip_first_space.)
    GrammarConstraint c(*grammar, v.trie, {v.tok->vocab().eos}, v.tok->vocab().add_space_prefix);
    for (int32_t id : v.ids) {
      std::fill(logits.begin(), logits.end(), 0.0f);
      benchmark::DoNotOptimize(c.Mask(logits.data(), V));
      if (!c.Advance(id)) {
        state.SkipWithError("the text's own tokens were refused");
        return;
      }
    }
    tokens += static_cast<int64_t>(v.ids.size());
  }
  state.counters["vocab"] = V;
  state.counters["ms_per_token"] = benchmark::Counter(
      static_cast<double>(tokens), benchmark::Counter::kIsRate | benchmark::Counter::kInvert,
      benchmark::Counter::OneK::kIs1000);
}

int Register() {
  auto model = FindDefaultModel();
  if (model.ok()) benchmark::RegisterBenchmark("JsonModeMask/kjv-7m", BM_JsonModeMask, *model);
  const std::string dir = std::string(INFERA_SHARED_DIR) + "/data/tokenizers/llamacpp/";
  for (const char* name : {"llama-spm", "phi-3", "gpt-2", "falcon"}) {
    benchmark::RegisterBenchmark((std::string("JsonModeMask/") + name).c_str(), BM_JsonModeMask,
                                 dir + "ggml-vocab-" + name + ".gguf")
        ->Unit(benchmark::kMillisecond);
  }
  return 0;
}
const int kRegistered = Register();

}  // namespace
}  // namespace infera

BENCHMARK_MAIN();
