// infera: one program from a model file to generated text.
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>

#include <CLI/CLI.hpp>

#include "base/logging.h"
#include "build_paths.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  using namespace infera;
  CLI::App app{"infera: run large language models fast", "infera"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(INFERA_VERSION));
  std::string log_level = isatty(STDERR_FILENO) ? "info" : "warn";
  auto* log_opt = app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off (default: info on a terminal, else warn)");
  std::string log_format = "auto";
  app.add_option("--log-format", log_format,
                 "text|json|auto (auto: json for `serve` when stderr is not a terminal, else text)");
  cli::RuntimeOptions rt;
  app.add_option("--cpu-isa", rt.cpu_isa, "force a kernel ISA: scalar, avx2, avx512 (default: best available)");

  std::map<CLI::App*, cli::CommandFn> commands;
  auto add = [&](const char* name, const char* help, cli::CommandFn (*reg)(CLI::App&, const cli::RuntimeOptions&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    sub->fallthrough();  // global options (--log-level, --log-format, --cpu-isa) may follow the subcommand
    commands[sub] = reg(*sub, rt);
  };
  add("run", "generate text from a prompt", cli::RegisterRun);
  add("generate", "offline batch generation from a JSONL file through the serving engine", cli::RegisterGenerate);
  add("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, streaming)", cli::RegisterServe);
  add("bench-serve", "load generator for a running server: throughput, TTFT, TPOT, ITL, latency", cli::RegisterBenchServe);
  add("top", "live view of a running server's /metrics: requests/s, tokens/s, TTFT, KV usage, queue", cli::RegisterTop);
  add("info", "print a model's architecture, tensors and memory needs", cli::RegisterInfo);
  add("bench", "measure prompt-processing and generation speed", cli::RegisterBench);
  add("convert", "write a GGUF from a GGUF, Hugging Face folder or llama2.c checkpoint", cli::RegisterConvert);
  add("quantize", "write a GGUF with quantized weights (q8_0, q4_0, q4_1, q5_0, q5_1)", cli::RegisterQuantize);
  add("perplexity", "perplexity of a text (llama-perplexity's method), KL divergence against a base", cli::RegisterPerplexity);
  add("tokenize", "print the token ids of a text", cli::RegisterTokenize);
  add("detokenize", "print the text of token ids", cli::RegisterDetokenize);
  add("dump-tensor", "write one GGUF tensor dequantized to raw f32 (testing aid)", cli::RegisterDumpTensor);
  add("eval-logits", "print the logits of a token sequence (testing aid)", cli::RegisterEvalLogits);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return cli::ReportError(e.what());
  }
  for (auto& [sub, fn] : commands) {
    // A server logs its requests (info) unless told otherwise.
    if (sub->parsed() && sub->get_name() == "serve" && log_opt->count() == 0) log_level = "info";
  }
  LogLevel level;
  if (!ParseLogLevel(log_level, &level)) return cli::ReportError("--log-level must be one of trace, debug, info, warn, error, off");
  LogFormat format = LogFormat::kText;
  if (log_format == "json") {
    format = LogFormat::kJson;
  } else if (log_format == "auto") {
    for (auto& [sub, fn] : commands) {
      if (sub->parsed() && sub->get_name() == "serve" && !isatty(STDERR_FILENO)) format = LogFormat::kJson;
    }
  } else if (log_format != "text") {
    return cli::ReportError("--log-format must be text, json or auto");
  }
  InitLogging(level, format);
  for (auto& [sub, fn] : commands) {
    if (sub->parsed()) {
      try {
        return fn();
      } catch (const std::bad_alloc&) {
        return cli::ReportError("out of memory");
      } catch (const std::exception& e) {
        std::fprintf(stderr, "infera: internal error: %s\n", e.what());
        return cli::kExitInternal;
      }
    }
  }
  return cli::kExitBadInput;
}
