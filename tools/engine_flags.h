// Engine flags shared by `generate`, `bench --parallel` and `serve`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "infera/engine.h"
#include "model/loader.h"
#include "model/lora.h"
#include "model/model.h"

namespace infera::cli {

// LoRA adapters (model/lora.h): llama.cpp's --lora, --lora-scaled and
// --lora-init-without-apply; vLLM's --lora-modules.
struct LoraFlags {
  std::vector<std::string> lora;          // at scale 1
  std::vector<std::string> lora_scaled;   // FILE:SCALE, or FILE SCALE (two words), at a given scale
  std::vector<std::string> lora_modules;  // NAME=PATH: off unless a request names it
  bool init_without_apply = false;        // every adapter starts at scale 0
};
// with_modules: also --lora-modules (the server, where requests name them).
void AddLoraFlags(CLI::App& app, LoraFlags* f, bool with_modules);
// Loads the adapters (in that order: --lora, --lora-scaled, --lora-modules)
// for `model` and points `o` at them; they must outlive the engine. Names
// must be distinct (the file or folder name; --lora-modules' NAME).
StatusOr<std::vector<std::unique_ptr<LoraAdapter>>> LoadLoraAdapters(const LoraFlags& f, const Model& model,
                                                                     EngineOptions* o);

struct EngineFlags {
  EngineOptions opts;
  std::string draft_model;  // path; loaded by the command (LoadDraftModel)
  bool no_prefix_cache = false;
  bool enable_prefix_cache = false;  // vLLM's flag: the default anyway
  std::string admission = "preempt";
  LoraFlags lora;
};

void AddEngineFlags(CLI::App& app, EngineFlags* f);
// The speculative decoding flags (also `run`'s); Engine::Create checks them.
void AddSpecFlags(CLI::App& app, EngineOptions* o, std::string* draft_model_path);
// Loads the --draft-model file (none: null) for the main model's kernels
// (`lo`: ForKernels) and points `o` at it (`--spec` becomes "draft" unless
// set). The model must outlive the engine.
StatusOr<std::unique_ptr<Model>> LoadDraftModel(const std::string& path, const ModelLoadOptions& lo, EngineOptions* o);
// Resolved options, or an error message (empty when fine).
std::string ResolveEngineFlags(EngineFlags* f, int threads);

}  // namespace infera::cli
