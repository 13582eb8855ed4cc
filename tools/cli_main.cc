// The infera command line: global flags, the subcommands, errors and exit codes.
#include "tools/cli_main.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include <CLI/CLI.hpp>

#include "base/logging.h"
#include "build_paths.h"
#include "tools/commands.h"
#include "tools/foreign_flags.h"

namespace infera::cli {

int Main(int argc, char** argv) {
  CLI::App app{"infera: run large language models fast", "infera"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(INFERA_VERSION));
  std::string log_level = isatty(STDERR_FILENO) ? "info" : "warn";
  auto* log_opt = app.add_option("--log-level", log_level,
                                 "trace|debug|info|warn|error|off (default: info on a terminal, else warn)");
  std::string log_format = "auto";
  app.add_option("--log-format", log_format,
                 "text|json|auto (auto: json for `serve` when stderr is not a terminal, else text)");
  cli::RuntimeOptions rt;
  app.add_option("--cpu-isa", rt.cpu_isa, "force a kernel ISA: scalar, avx2, avx512, amx (default: best available)");
  app.add_option("--attn-dtype", rt.attn_dtype,
                 "attention's products over an f32 KV cache: f32, or bf16 (queries, K, V and probabilities rounded "
                 "to bf16, sums in f32); --kv-cache-type bf16 gives the same bits with half the memory, faster")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--matmul-dtype", rt.matmul_dtype,
                 "products of F32/F16/BF16 weight matrices: f32 (exact), or bf16 (weights and activations rounded "
                 "to bf16, sums in f32; AVX512-BF16 VDPBF16PS or AMX-BF16 tiles with --cpu-isa amx; F32/F16 "
                 "matrices stored as bf16 at load); quantized weights are unaffected")
      ->check(CLI::IsMember({"f32", "bf16"}));

  // Every option's default value shows in --help.
  app.option_defaults()->always_capture_default();
  std::map<CLI::App*, cli::CommandFn> commands;
  auto add = [&](const char* name, const char* help, cli::CommandFn (*reg)(CLI::App&, const cli::RuntimeOptions&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    sub->fallthrough();  // global options (--log-level, --log-format, --cpu-isa, --attn-dtype, --matmul-dtype) may
                         // follow the subcommand
    commands[sub] = reg(*sub, rt);
  };
  add("run", "generate text from a prompt", cli::RegisterRun);
  add("generate", "offline batch generation from a JSONL file through the serving engine", cli::RegisterGenerate);
  add("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, streaming)", cli::RegisterServe);
  add("bench-serve", "load generator for a running server: throughput, TTFT, TPOT, ITL, latency",
      cli::RegisterBenchServe);
  add("top", "live view of a running server's /metrics: requests/s, tokens/s, TTFT, KV usage, queue", cli::RegisterTop);
  add("deploy", "configuration for production: infera deploy nginx --replicas host:port,... > infera.conf",
      cli::RegisterDeploy);
  add("info", "print a model's architecture, tensors and memory needs", cli::RegisterInfo);
  add("bench", "measure prompt-processing and generation speed", cli::RegisterBench);
  add("convert", "write a GGUF from a GGUF, Hugging Face folder or llama2.c checkpoint", cli::RegisterConvert);
  add("quantize", "write a GGUF with quantized weights (any llama.cpp block type or mixture, e.g. q4_k_m)",
      cli::RegisterQuantize);
  add("imatrix", "importance matrix from calibration text (llama.cpp's GGUF or .dat format) for quantize --imatrix",
      cli::RegisterImatrix);
  add("perplexity", "perplexity of a text (llama-perplexity's method), KL divergence against a base",
      cli::RegisterPerplexity);
  add("eval", "multiple-choice accuracy (hellaswag, winogrande, JSONL) or LAMBADA-style last-word accuracy",
      cli::RegisterEval);
  add("tokenize", "print the token ids of a text", cli::RegisterTokenize);
  add("detokenize", "print the text of token ids", cli::RegisterDetokenize);
  add("prune", "write a pruned GGUF: magnitude, Wanda, SparseGPT (unstructured, 2:4, 4:8) or structured heads / FFN",
      cli::RegisterPrune);
  add("dump-tensor", "write one GGUF tensor dequantized to raw f32 (testing aid)", cli::RegisterDumpTensor);
  add("eval-logits", "print the logits of a token sequence (testing aid)", cli::RegisterEvalLogits);
  std::string help_topic;
  CLI::App* help = app.add_subcommand("help", "print the help of infera or of one command: infera help [COMMAND]");
  help->add_option("command", help_topic, "the command");

  // llama.cpp / vLLM spellings first (-ngl 99 would otherwise parse as -n gl).
  // The command's own options keep their meaning: the command is the first
  // argument that names one.
  const std::vector<std::string> raw(argv + 1, argv + argc);
  CLI::App* command = nullptr;
  for (const std::string& a : raw) {
    if (command != nullptr || a.empty() || a[0] == '-') continue;
    for (CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->get_name() == a) command = sub;
    }
  }
  const cli::TranslatedArgs translated = cli::TranslateForeignFlags(raw, [command](const std::string& name) {
    return command != nullptr && command->get_option_no_throw(name) != nullptr;
  });
  if (!translated.error.empty()) return cli::ReportError(translated.error);
  for (const std::string& note : translated.notes) std::fprintf(stderr, "infera: note: %s\n", note.c_str());
  std::vector<char*> args = {argv[0]};
  for (const std::string& a : translated.args) args.push_back(const_cast<char*>(a.c_str()));

  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return cli::ReportError(e.what());
  }
  if (help->parsed()) {
    if (help_topic.empty()) {
      // (App::help() would describe the selected subcommand, `help` itself.)
      std::fputs(app.get_formatter()->make_help(&app, "infera", CLI::AppFormatMode::Normal).c_str(), stdout);
      return cli::kExitOk;
    }
    CLI::App* topic = nullptr;
    for (auto& [sub, fn] : commands) {
      if (sub->get_name() == help_topic) topic = sub;
    }
    if (topic == nullptr) return cli::ReportError("help: no command '" + help_topic + "' (infera help lists them)");
    std::fputs(topic->help().c_str(), stdout);
    return cli::kExitOk;
  }
  for (auto& [sub, fn] : commands) {
    // A server logs its requests (info) unless told otherwise.
    if (sub->parsed() && sub->get_name() == "serve" && log_opt->count() == 0) log_level = "info";
  }
  LogLevel level;
  if (!ParseLogLevel(log_level, &level))
    return cli::ReportError("--log-level must be one of trace, debug, info, warn, error, off");
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
        const int rc = fn();
        // Output nobody received is a failure (run ... > /dev/full).
        if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
          std::fprintf(stderr, "infera: error: cannot write to standard output: %s\n", std::strerror(errno));
          return rc == cli::kExitOk ? cli::kExitInternal : rc;
        }
        return rc;
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

}  // namespace infera::cli
