// libFuzzer target: llama2.c checkpoints and tokenizer files.
#include <cstddef>
#include <cstdint>

#include "formats/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace infera;
  (void)Llama2cCheckpoint::Parse(data, size, "fuzz.bin");
  (void)ParseLlama2cTokenizer(data, size, "fuzz_tok.bin", -1);
  (void)ParseLlama2cTokenizer(data, size, "fuzz_tok.bin", 16);
  return 0;
}
