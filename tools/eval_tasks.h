// Evaluation task files for `infera eval`, parsed into one shape: each task
// has choices (a prefix and the continuation scored after it) and the index
// of the right one. Formats:
//   hellaswag  llama.cpp's --hellaswag text: 6 lines per task (context, gold
//              index, 4 endings); an ending is scored after context + " ".
//   winogrande llama.cpp's --winogrande CSV (index,sentence,option1,option2,
//              answer; "_" in the sentence): each option fills the blank and
//              the rest of the sentence is scored after it.
//   jsonl      one object per line, HellaSwag-style: {"ctx", "endings",
//              "label"} (also "context"/"question", "choices", "answer").
//   lambada    plain text, one passage per line: its last word is the
//              target (accuracy: every target token is the model's argmax).
// Pure parsing; no model knowledge.
#pragma once

#include <string>
#include <vector>

#include "infera/status.h"

namespace infera::cli {

struct EvalChoice {
  std::string prefix;        // conditioning text
  std::string continuation;  // scored text (with its leading space)
};

struct EvalTask {
  std::vector<EvalChoice> choices;  // one for lambada
  int label = 0;                    // index of the right choice
};

enum class EvalFormat { kHellaswag, kWinogrande, kJsonl, kLambada };

// "hellaswag", "winogrande", "jsonl", "lambada"; or "" to guess from the file
// name's extension (.jsonl, .csv) and, for .txt, its content.
StatusOr<EvalFormat> ParseEvalFormat(const std::string& name, const std::string& path, const std::string& text);
const char* EvalFormatName(EvalFormat f);

// The tasks of `text` (the file's contents; `path` for messages).
StatusOr<std::vector<EvalTask>> ParseEvalTasks(EvalFormat f, const std::string& text, const std::string& path);

}  // namespace infera::cli
