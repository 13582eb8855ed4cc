#include "tools/eval_tasks.h"

#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/json.h"

namespace infera::cli {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(at, nl - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(std::move(line));
    at = nl + 1;
  }
  while (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

// " " + s (spelled out: GCC 12 warns falsely on operator+ here).
std::string WithLeadingSpace(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 1);
  out.push_back(' ');
  out.append(s);
  return out;
}

bool IsSmallInt(const std::string& s) {
  return !s.empty() && s.size() <= 3 && s.find_first_not_of("0123456789") == std::string::npos;
}

StatusOr<std::vector<EvalTask>> ParseHellaswag(const std::string& text, const std::string& path) {
  const auto lines = Lines(text);
  if (lines.empty() || lines.size() % 6 != 0) {
    return InvalidArgument(fmt::format("{}: {} lines; the hellaswag format has 6 per task (context, gold index, "
                                       "4 endings)", path, lines.size()));
  }
  std::vector<EvalTask> tasks;
  for (size_t i = 0; i < lines.size(); i += 6) {
    if (!IsSmallInt(lines[i + 1]) || std::stoi(lines[i + 1]) > 3) {
      return InvalidArgument(fmt::format("{}:{}: the gold ending index must be 0..3, not '{}'", path, i + 2,
                                         lines[i + 1]));
    }
    EvalTask t;
    t.correct = {std::stoi(lines[i + 1])};
    for (int j = 0; j < 4; ++j) t.choices.push_back({lines[i], WithLeadingSpace(lines[i + 2 + j])});
    tasks.push_back(std::move(t));
  }
  return tasks;
}

// One CSV record's fields (RFC 4180 quotes; no newlines inside fields).
std::vector<std::string> CsvFields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

StatusOr<std::vector<EvalTask>> ParseWinogrande(const std::string& text, const std::string& path) {
  auto lines = Lines(text);
  std::vector<EvalTask> tasks;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto f = CsvFields(lines[i]);
    if (i == 0 && !f.empty() && f[0] == "index") continue;  // header
    if (f.size() != 5) return InvalidArgument(fmt::format("{}:{}: expected 5 CSV fields, got {}", path, i + 1, f.size()));
    const size_t blank = f[1].find('_');
    if (blank == std::string::npos) return InvalidArgument(fmt::format("{}:{}: the sentence has no '_'", path, i + 1));
    if (f[4] != "1" && f[4] != "2") return InvalidArgument(fmt::format("{}:{}: answer must be 1 or 2", path, i + 1));
    const std::string first = f[1].substr(0, blank), rest = f[1].substr(blank + 1);
    EvalTask t;
    t.correct = {f[4] == "1" ? 0 : 1};
    for (int o = 2; o <= 3; ++o) t.choices.push_back({first + f[o], rest});
    tasks.push_back(std::move(t));
  }
  if (tasks.empty()) return InvalidArgument(path + ": no winogrande tasks");
  return tasks;
}

const nlohmann::json* FirstOf(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    if (j.contains(k)) return &j[k];
  }
  return nullptr;
}

StatusOr<std::vector<EvalTask>> ParseJsonl(const std::string& text, const std::string& path) {
  const auto lines = Lines(text);
  std::vector<EvalTask> tasks;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find_first_not_of(" \t") == std::string::npos) continue;
    const auto j = ParseJson(lines[i]);
    const std::string where = fmt::format("{}:{}", path, i + 1);
    if (!j.is_object()) return InvalidArgument(where + ": not a JSON object");
    const auto* ctx = FirstOf(j, {"ctx", "context", "question"});
    const auto* ends = FirstOf(j, {"endings", "choices"});
    const auto* label = FirstOf(j, {"label", "answer"});
    if (!ctx || !ctx->is_string() || !ends || !ends->is_array() || ends->size() < 2 || !label) {
      return InvalidArgument(where + ": needs \"ctx\" (string), \"endings\" (2 or more strings) and \"label\"");
    }
    int lab = -1;
    if (label->is_number_integer()) lab = label->get<int>();
    else if (label->is_string() && IsSmallInt(label->get<std::string>())) lab = std::stoi(label->get<std::string>());
    if (lab < 0 || lab >= static_cast<int>(ends->size())) return InvalidArgument(where + ": label out of range");
    EvalTask t;
    t.correct = {lab};
    for (const auto& e : *ends) {
      if (!e.is_string()) return InvalidArgument(where + ": endings must be strings");
      t.choices.push_back({ctx->get<std::string>(), WithLeadingSpace(e.get<std::string>())});
    }
    tasks.push_back(std::move(t));
  }
  if (tasks.empty()) return InvalidArgument(path + ": no tasks");
  return tasks;
}

StatusOr<std::vector<EvalTask>> ParseLambada(const std::string& text, const std::string& path) {
  std::vector<EvalTask> tasks;
  for (std::string line : Lines(text)) {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos || sp == 0) continue;  // a passage needs context and a last word
    tasks.push_back(EvalTask{{{line.substr(0, sp), line.substr(sp)}}, {0}});
  }
  if (tasks.empty()) return InvalidArgument(path + ": no passages (one per line, at least two words)");
  return tasks;
}

// Little-endian reads with bounds checks over a binary task file.
class BinReader {
 public:
  explicit BinReader(const std::string& b) : b_(b) {}
  bool U32(uint32_t* v) {
    if (b_.size() - pos_ < 4) return false;
    std::memcpy(v, b_.data() + pos_, 4);
    pos_ += 4;
    return true;
  }
  bool Str(std::string* s) {
    uint32_t n;
    if (!U32(&n) || n > b_.size() - pos_) return false;
    s->assign(b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool Skip(uint64_t n) {
    if (n > b_.size() - pos_) return false;
    pos_ += n;
    return true;
  }

 private:
  const std::string& b_;
  size_t pos_ = 0;
};

// One answer set: answers and their labels (1: right).
bool ReadAnswerSet(BinReader* in, std::vector<std::string>* answers, std::vector<int32_t>* labels) {
  uint32_t n;
  if (!in->U32(&n) || n > 100) return false;
  answers->resize(n);
  labels->resize(n);
  for (auto& a : *answers) {
    if (!in->Str(&a)) return false;
  }
  for (auto& l : *labels) {
    uint32_t v;
    if (!in->U32(&v)) return false;
    l = static_cast<int32_t>(v);
  }
  return true;
}

StatusOr<std::vector<EvalTask>> ParseMultipleChoice(const std::string& bytes, const std::string& path) {
  BinReader in(bytes);
  uint32_t n_task = 0;
  if (!in.U32(&n_task) || n_task == 0 || !in.Skip(4ull * n_task)) {
    return InvalidArgument(path + ": not a multiple-choice task file (no tasks)");
  }
  std::vector<EvalTask> tasks;
  for (uint32_t i = 0; i < n_task; ++i) {
    std::string question;
    std::vector<std::string> answers, unused;
    std::vector<int32_t> labels, unused_labels;
    if (!in.Str(&question) || !ReadAnswerSet(&in, &answers, &labels) || !ReadAnswerSet(&in, &unused, &unused_labels)) {
      return InvalidArgument(fmt::format("{}: task {} of {} is truncated or corrupt", path, i + 1, n_task));
    }
    EvalTask t;
    for (size_t k = 0; k < answers.size(); ++k) {
      if (answers[k].empty()) return InvalidArgument(fmt::format("{}: task {} has an empty answer", path, i + 1));
      t.choices.push_back({question, WithLeadingSpace(answers[k])});
      if (labels[k] == 1) t.correct.push_back(static_cast<int>(k));
    }
    if (question.empty() || t.choices.size() < 2 || t.correct.empty()) {
      return InvalidArgument(fmt::format("{}: task {} needs a question, 2 or more answers and one labelled 1", path,
                                         i + 1));
    }
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace

const char* EvalFormatName(EvalFormat f) {
  switch (f) {
    case EvalFormat::kHellaswag: return "hellaswag";
    case EvalFormat::kWinogrande: return "winogrande";
    case EvalFormat::kJsonl: return "jsonl";
    case EvalFormat::kLambada: return "lambada";
    case EvalFormat::kMultipleChoice: return "multiple-choice";
  }
  return "?";
}

StatusOr<EvalFormat> ParseEvalFormat(const std::string& name, const std::string& path, const std::string& text) {
  for (EvalFormat f : {EvalFormat::kHellaswag, EvalFormat::kWinogrande, EvalFormat::kJsonl, EvalFormat::kLambada,
                       EvalFormat::kMultipleChoice}) {
    if (name == EvalFormatName(f)) return f;
  }
  if (!name.empty()) {
    return InvalidArgument("--format must be hellaswag, winogrande, jsonl, lambada or multiple-choice");
  }
  if (path.ends_with(".bin")) return EvalFormat::kMultipleChoice;
  if (path.ends_with(".jsonl") || path.ends_with(".json")) return EvalFormat::kJsonl;
  if (path.ends_with(".csv")) return EvalFormat::kWinogrande;
  const auto lines = Lines(text);
  if (lines.size() >= 6 && lines.size() % 6 == 0 && IsSmallInt(lines[1])) return EvalFormat::kHellaswag;
  return EvalFormat::kLambada;
}

StatusOr<std::vector<EvalTask>> ParseEvalTasks(EvalFormat f, const std::string& text, const std::string& path) {
  switch (f) {
    case EvalFormat::kHellaswag: return ParseHellaswag(text, path);
    case EvalFormat::kWinogrande: return ParseWinogrande(text, path);
    case EvalFormat::kJsonl: return ParseJsonl(text, path);
    case EvalFormat::kLambada: return ParseLambada(text, path);
    case EvalFormat::kMultipleChoice: return ParseMultipleChoice(text, path);
  }
  return InvalidArgument("unknown format");
}

}  // namespace infera::cli
