// libFuzzer target: GGUF parsing and everything that interprets a parsed
// file (config, tokenizer, weight views). Must never crash or read out of
// bounds, whatever the bytes.
#include <cstddef>
#include <cstdint>

#include "formats/gguf_reader.h"
#include "model/config.h"
#include "model/weights.h"
#include "tokenizer/loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace infera;
  auto f = GgufFile::Parse(data, size, "fuzz.gguf");
  if (!f.ok()) return 0;
  const GgufFile& file = **f;
  if (auto tok = TokenizerFromGguf(file); tok.ok()) {
    auto ids = (*tok)->Encode("Hello world <s> \xE2\x82\xAC!", true, true);
    for (int32_t id : ids) {
      if (id < 0 || id >= (*tok)->n_vocab()) __builtin_trap();  // every id must be valid
    }
    (void)(*tok)->Decode(ids);
  }
  auto cfg = ConfigFromGguf(file);
  if (!cfg.ok()) return 0;
  // Keep the weight build cheap: skip absurdly large configs.
  if (static_cast<int64_t>(cfg->n_layer) * cfg->n_embd > (1 << 20)) return 0;
  TensorLookup lookup = [&](const std::string& n) { return file.FindTensor(n); };
  (void)BuildWeights(*cfg, lookup, {}, "fuzz.gguf");
  return 0;
}
