// libFuzzer target: safetensors header parsing and HF config parsing.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/safetensors.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace infera;
  (void)SafetensorsSet::Parse(data, size, "fuzz.safetensors");
  // The same bytes as a config.json.
  (void)ConfigFromHfJson(std::string(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
  return 0;
}
