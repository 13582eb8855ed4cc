// libFuzzer target: importance-matrix files (llama-imatrix's legacy .dat and
// GGUF formats), which `infera quantize --imatrix` reads from wherever the
// user got them: untrusted input. Every entry that parses is then read the
// way quantize reads it. Must never crash, whatever the bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/gguf_reader.h"
#include "quant/imatrix.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace infera;
  StatusOr<Imatrix> im = InvalidArgument("");
  if (size >= 4 && std::string(reinterpret_cast<const char*>(data), 4) == "GGUF") {
    auto f = GgufFile::Parse(data, size, "fuzz.gguf");
    if (!f.ok()) return 0;
    im = Imatrix::FromGguf(**f, "fuzz.gguf");
  } else {
    im = Imatrix::ParseLegacy(std::string(reinterpret_cast<const char*>(data), size), "fuzz.dat");
  }
  if (!im.ok()) return 0;
  volatile float sink = 0;
  for (const auto& [name, e] : im->entries) {
    for (float v : im->Importance(name)) sink = sink + v;
  }
  return 0;
}
