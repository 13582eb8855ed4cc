// Engine flags shared by `generate`, `bench --parallel` and `serve`.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "infera/engine.h"
#include "model/loader.h"
#include "model/model.h"

namespace infera::cli {

struct EngineFlags {
  EngineOptions opts;
  std::string draft_model;  // path; loaded by the command (LoadDraftModel)
  bool no_prefix_cache = false;
  bool enable_prefix_cache = false;  // vLLM's flag: the default anyway
  std::string admission = "preempt";
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
