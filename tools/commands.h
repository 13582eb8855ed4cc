// The infera subcommands. Each registers its flags on a CLI11 subcommand and
// runs after parsing, returning the process exit code.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "tools/cli_common.h"

namespace infera::cli {

// Registers the subcommand; the returned function runs it after parsing.
using CommandFn = std::function<int()>;
CommandFn RegisterRun(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterInfo(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterBench(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterConvert(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterTokenize(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterDetokenize(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterDumpTensor(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterQuantize(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterImatrix(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterEval(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterPrune(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterPerplexity(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterEvalLogits(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterGenerate(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterServe(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterBenchServe(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterTop(CLI::App& app, const RuntimeOptions& rt);
CommandFn RegisterDeploy(CLI::App& app, const RuntimeOptions& rt);

// `infera eval` of one task file (format as --format; limit 0: every task):
// what llama-perplexity's --hellaswag / --winogrande / --multiple-choice run.
int RunTaskEval(const std::string& model, const std::string& file, const std::string& format, int limit, int threads,
                bool json, const RuntimeOptions& rt);

}  // namespace infera::cli
