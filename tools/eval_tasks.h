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
//   multiple-choice  llama.cpp's --multiple-choice binary (its TruthfulQA /
//              ARC / MMLU serializations): u32 n_task, u32 offsets[n_task],
//              per task a question and two answer sets (u32 n, n strings of
//              u32 length + bytes, n i32 labels); the first set is scored
//              (any answer labelled 1 is right), each answer after
//              question + " ".
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
  std::vector<int> correct;         // indices of the right choices (one, but for multiple-choice sets)
};

enum class EvalFormat { kHellaswag, kWinogrande, kJsonl, kLambada, kMultipleChoice };

// "hellaswag", "winogrande", "jsonl", "lambada", "multiple-choice"; or "" to
// guess from the file name's extension (.jsonl, .csv, .bin) and, for text,
// its content.
StatusOr<EvalFormat> ParseEvalFormat(const std::string& name, const std::string& path, const std::string& text);
const char* EvalFormatName(EvalFormat f);

// The tasks of `text` (the file's contents; `path` for messages).
StatusOr<std::vector<EvalTask>> ParseEvalTasks(EvalFormat f, const std::string& text, const std::string& path);

}  // namespace infera::cli
