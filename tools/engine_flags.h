// Engine flags shared by `generate`, `bench --parallel` and `serve`.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "infera/engine.h"

namespace infera::cli {

struct EngineFlags {
  EngineOptions opts;
  bool no_prefix_cache = false;
  bool enable_prefix_cache = false;  // vLLM's flag: the default anyway
  std::string admission = "preempt";
};

void AddEngineFlags(CLI::App& app, EngineFlags* f);
// The speculative decoding flags (also `run`'s); Engine::Create checks them.
void AddSpecFlags(CLI::App& app, EngineOptions* o);
// Resolved options, or an error message (empty when fine).
std::string ResolveEngineFlags(EngineFlags* f, int threads);

}  // namespace infera::cli
