// libFuzzer target: `infera eval` task files (llama.cpp's hellaswag text,
// winogrande CSV, JSONL, LAMBADA text and the binary multiple-choice
// format), which come from wherever the user got them. The first byte picks
// the format; every format must reject bad bytes with an error, never crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tools/eval_tasks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace infera::cli;
  if (size == 0) return 0;
  const EvalFormat formats[] = {EvalFormat::kHellaswag, EvalFormat::kWinogrande, EvalFormat::kJsonl,
                                EvalFormat::kLambada, EvalFormat::kMultipleChoice};
  const EvalFormat f = formats[data[0] % 5];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto tasks = ParseEvalTasks(f, text, "fuzz");
  if (!tasks.ok()) return 0;
  volatile size_t sink = 0;
  for (const EvalTask& t : *tasks) {
    for (const EvalChoice& c : t.choices) sink = sink + c.prefix.size() + c.continuation.size();
    for (int k : t.correct) sink = sink + static_cast<size_t>(k);
  }
  auto guessed = ParseEvalFormat("", "fuzz.txt", text);
  (void)guessed;
  return 0;
}
