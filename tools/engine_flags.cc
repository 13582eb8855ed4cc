#include "tools/engine_flags.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "attention/kv_storage.h"
#include "base/json.h"
#include "tools/cli_common.h"

namespace infera::cli {

void AddEngineFlags(CLI::App& app, EngineFlags* f) {
  app.add_option("--kv-cache-mb", f->opts.kv_cache_mb, "KV cache size (default: a quarter of free RAM, capped)");
  app.add_option("--kv-block-size,--block-size", f->opts.kv_block_size, "tokens per KV block");
  app.add_option("--max-num-seqs", f->opts.max_num_seqs, "sequences per batch");
  app.add_option("--max-batched-tokens,--max-num-batched-tokens", f->opts.max_batched_tokens, "tokens per batch");
  app.add_option("--max-model-len", f->opts.max_model_len,
                 "context per sequence (0: the model's trained context; more is refused)");
  app.add_flag("--no-prefix-cache", f->no_prefix_cache, "do not reuse the KV blocks of shared prefixes");
  app.add_flag("--enable-prefix-caching", f->enable_prefix_cache, "prefix caching (on by default; vLLM's flag)");
  app.add_option("--kv-cache-type", f->opts.kv_cache_type, "f32 (default), bf16 (half the memory; bf16 attention products) or q8 (int8, a scale per token and KV head)");
  app.add_flag("--context-shift", f->opts.context_shift,
               "at the context end keep the first --context-keep tokens and the newer half of the rest, and go on");
  app.add_option("--context-keep", f->opts.context_keep, "tokens kept at the start by --context-shift (default 4)");
  app.add_option("--admission", f->admission,
                 "preempt (admit when the next chunk fits; preempt and recompute when memory runs out) or "
                 "guaranteed (admit only when prompt + max_tokens fit; never preempt)");
  KvOffloadOptions& k = f->opts.kv_offload;
  app.add_option("--kv-offload-dir", k.dir,
                 "keep computed KV blocks in this directory too (a second prefix-cache tier; survives restarts)");
  app.add_option("--kv-offload-dir-gb", k.dir_gb, "disk tier budget in GiB (default 10; least recently used go)");
  app.add_option("--kv-offload-redis", k.redis_url,
                 "keep computed KV blocks in Redis too: redis://[:password@]host[:port][/db] (shared by replicas)");
  app.add_option("--kv-offload-ttl", k.ttl_seconds, "expiry of a block in Redis, seconds (default 86400; 0: none)");
  app.add_option("--kv-offload-type", k.type,
                 "stored K/V: auto (as the KV cache, default), f32, or q8 (int8 rows: a quarter of f32, approximate)");
  app.add_option("--kv-offload-timeout-ms", k.timeout_ms,
                 "Redis connect/read/write timeout (default 500); a slower tier is skipped and the prefix recomputed");
  AddSpecFlags(app, &f->opts, &f->draft_model);
  AddLoraFlags(app, &f->lora, /*with_modules=*/true);
}

void AddLoraFlags(CLI::App& app, LoraFlags* f, bool with_modules) {
  app.add_option("--lora", f->lora,
                 "LoRA adapters applied on top of the model at scale 1: llama.cpp's GGUF adapter files or PEFT "
                 "folders (adapter_config.json + adapter_model.safetensors); comma-separated or repeated")
      ->delimiter(',');
  app.add_option("--lora-scaled", f->lora_scaled,
                 "FILE:SCALE[,FILE:SCALE...] (or FILE SCALE): LoRA adapters at these scales; repeatable")
      ->expected(1, 2)
      ->delimiter(',');
  app.add_flag("--lora-init-without-apply", f->init_without_apply,
               "load the adapters with scale 0 (requests or POST /lora-adapters turn them on)");
  if (with_modules) {
    app.add_option("--lora-modules", f->lora_modules,
                   "NAME=PATH ... (or vLLM's JSON {\"name\": NAME, \"path\": PATH}): LoRA adapters off by default, "
                   "each served as model NAME (a request with \"model\": NAME runs with that adapter; vLLM's flag)")
        ->expected(1, -1);
  }
}

StatusOr<std::vector<std::unique_ptr<LoraAdapter>>> LoadLoraAdapters(const LoraFlags& f, const Model& model,
                                                                     EngineOptions* o) {
  std::vector<std::unique_ptr<LoraAdapter>> out;
  auto load = [&](const std::string& path, double scale, const std::string& name) -> Status {
    if (!std::isfinite(scale)) return InvalidArgument(fmt::format("LoRA scale for {} must be finite", path));
    ASSIGN_OR_RETURN(std::unique_ptr<LoraAdapter> a, LoadLoraAdapter(path, model));
    if (!name.empty()) a->name = name;
    a->default_scale = f.init_without_apply ? 0.0f : static_cast<float>(scale);
    for (const auto& other : out) {
      if (other->name == a->name) {
        return InvalidArgument(
            fmt::format("two LoRA adapters are named '{}'; name them with --lora-modules "
                        "NAME=PATH",
                        a->name));
      }
    }
    out.push_back(std::move(a));
    return Status::Ok();
  };
  for (const std::string& p : f.lora) RETURN_IF_ERROR(load(p, 1.0, ""));
  for (size_t i = 0; i < f.lora_scaled.size(); ++i) {
    // FILE:SCALE, or FILE followed by SCALE (llama.cpp's older two-word form).
    const std::string& item = f.lora_scaled[i];
    auto number = [](const std::string& text, double* v) {
      char* end = nullptr;
      *v = std::strtod(text.c_str(), &end);
      return !text.empty() && *end == '\0';
    };
    double scale = 0;
    const size_t colon = item.rfind(':');
    if (colon != std::string::npos && colon > 0 && number(item.substr(colon + 1), &scale)) {
      RETURN_IF_ERROR(load(item.substr(0, colon), scale, ""));
    } else if (i + 1 < f.lora_scaled.size() && number(f.lora_scaled[i + 1], &scale)) {
      RETURN_IF_ERROR(load(item, scale, ""));
      ++i;
    } else {
      return InvalidArgument(fmt::format("--lora-scaled '{}': give FILE:SCALE", item));
    }
  }
  for (const std::string& m : f.lora_modules) {
    // vLLM's forms: NAME=PATH, or JSON {"name", "path"[, "base_model_name"]} (one object per argument:
    // CLI11 takes a "[...]" argument apart as a list of its own).
    if (!m.empty() && m.front() == '{') {
      const nlohmann::json e = ParseJson(m);
      {
        const bool ok = e.is_object() && e.contains("name") && e["name"].is_string() &&
                        !e["name"].get<std::string>().empty() && e.contains("path") && e["path"].is_string() &&
                        (!e.contains("base_model_name") || e["base_model_name"].is_string());
        if (!ok) {
          return InvalidArgument(fmt::format(
              "--lora-modules '{}': give NAME=PATH or one JSON object {{\"name\": ..., \"path\": ...}} per argument",
              m));
        }
        RETURN_IF_ERROR(load(e["path"].get<std::string>(), 0.0, e["name"].get<std::string>()));
      }
      continue;
    }
    const size_t eq = m.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == m.size()) {
      return InvalidArgument(fmt::format("--lora-modules '{}': give NAME=PATH", m));
    }
    RETURN_IF_ERROR(load(m.substr(eq + 1), 0.0, m.substr(0, eq)));
  }
  for (const auto& a : out) o->lora_adapters.push_back(a.get());
  return out;
}

void AddSpecFlags(CLI::App& app, EngineOptions* o, std::string* draft_model_path) {
  app.add_option("--spec", o->spec,
                 "speculative decoding: none (default), ngram (prompt lookup: verify the tokens that followed the "
                 "last n tokens' latest earlier occurrence; same output, faster when the output copies its input) "
                 "or draft (with --draft-model)");
  app.add_option("--draft-model", *draft_model_path,
                 "a much smaller model with the same vocabulary that drafts tokens for the model to verify "
                 "(speculative decoding: same output, faster where decode is memory-bound)");
  app.add_option("--draft-p-min", o->spec_p_min,
                 "the draft model stops drafting where its top probability is below this (default 0.75)");
  app.add_option("--draft-max", o->spec_draft_max, "drafted tokens per sequence and step, at most (default 8)");
  app.add_option("--draft-ctx", o->spec_draft_context,
                 "the draft model's context: on a new sequence, or one it fell further behind, it starts on the last "
                 "N tokens instead of catching up on them all (a long prompt costs it N tokens); 0: the whole "
                 "sequence (default)");
  app.add_option("--draft-min", o->spec_draft_min, "fewer drafted tokens found: no draft that step (default 1)");
  app.add_option("--spec-ngram-min", o->spec_ngram_min, "shortest n-gram looked up (default 2)");
  app.add_option("--spec-ngram-max", o->spec_ngram_max, "longest n-gram looked up (default 4)");
  app.add_flag("!--draft-fixed", o->spec_adaptive,
               "always draft --draft-max tokens when found (default: as many as pay, by the acceptance rate and the "
               "measured cost of verifying)");
  app.add_option("--spec-max-seqs", o->spec_max_seqs,
                 "draft only while at most this many sequences run (default 2; larger batches gain nothing)");
}

StatusOr<std::unique_ptr<Model>> LoadDraftModel(const std::string& path, const ModelLoadOptions& lo, EngineOptions* o) {
  if (path.empty()) return std::unique_ptr<Model>();
  ASSIGN_OR_RETURN(LoadedModel lm, LoadModelAndTokenizer(path, "", /*need_tokenizer=*/false, lo));
  o->draft_model = lm.model.get();
  if (o->spec == "none") o->spec = "draft";
  return std::move(lm.model);
}

std::string ResolveEngineFlags(EngineFlags* f, int threads) {
  if (threads < 0) return "--threads must be >= 0";
  f->opts.threads = ResolveThreads(threads);
  if (f->no_prefix_cache && f->enable_prefix_cache) return "--no-prefix-cache and --enable-prefix-caching contradict";
  f->opts.prefix_caching = !f->no_prefix_cache;
  if (f->admission == "guaranteed") f->opts.guaranteed_admission = true;
  else if (f->admission != "preempt") return "--admission must be preempt or guaranteed";
  if (f->opts.kv_cache_mb < 0) return "--kv-cache-mb must be >= 0";
  if (f->opts.max_model_len < 0) return "--max-model-len must be >= 0";
  if (f->opts.context_keep < 0) return "--context-keep must be >= 0";
  if (Status st = CheckModelFreeEngineOptions(f->opts); !st.ok()) return st.message();
  KvType kv_type;
  if (!ParseKvType(f->opts.kv_cache_type, &kv_type)) return "--kv-cache-type must be f32, bf16 or q8";
  const KvOffloadOptions& k = f->opts.kv_offload;
  if (!(k.dir_gb > 0)) return "--kv-offload-dir-gb must be > 0";
  if (k.ttl_seconds < 0) return "--kv-offload-ttl must be >= 0";
  if (k.timeout_ms < 1) return "--kv-offload-timeout-ms must be >= 1";
  if (k.type != "auto" && k.type != "f32" && k.type != "q8") return "--kv-offload-type must be auto, f32 or q8";
  if (k.enabled() && f->no_prefix_cache) return "--kv-offload-dir / --kv-offload-redis need prefix caching";
  return {};
}

}  // namespace infera::cli
