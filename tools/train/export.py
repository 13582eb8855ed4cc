"""Exports the best checkpoint to models/<name>/: a GGUF (llama.cpp keys and
tensor names, tokenizer and chat template embedded, Q/K permuted to GGUF's
rotary layout) and a Hugging Face folder (LlamaForCausalLM config.json,
model.safetensors, tokenizer files). Weights in F16, norms in F32 (GGUF)."""
import json
import math
import os
import shutil
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "py"))
sys.path.insert(0, HERE)
import model_files as mf  # noqa: E402

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def hf_weights(sd, cfg):
    """State dict -> HF names (numpy f32)."""
    W = {"model.embed_tokens.weight": sd["embed.weight"], "model.norm.weight": sd["norm.weight"],
         "lm_head.weight": sd["output.weight"]}
    for i in range(cfg["n_layers"]):
        p, b = f"model.layers.{i}.", f"blocks.{i}."
        W.update({p + "input_layernorm.weight": sd[b + "attn_norm.weight"],
                  p + "self_attn.q_proj.weight": sd[b + "wq.weight"], p + "self_attn.k_proj.weight": sd[b + "wk.weight"],
                  p + "self_attn.v_proj.weight": sd[b + "wv.weight"], p + "self_attn.o_proj.weight": sd[b + "wo.weight"],
                  p + "post_attention_layernorm.weight": sd[b + "ffn_norm.weight"],
                  p + "mlp.gate_proj.weight": sd[b + "w_gate.weight"], p + "mlp.up_proj.weight": sd[b + "w_up.weight"],
                  p + "mlp.down_proj.weight": sd[b + "w_down.weight"]})
    return {k: v.float().numpy() for k, v in W.items()}


def sp_vocab(model_path):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model_path)
    pieces, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        pieces.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_byte(i):
            types.append(6)
        elif pieces[-1] in ("<|im_start|>", "<|im_end|>"):
            types.append(4)
        else:
            types.append(1)
    return pieces, scores, types, sp


def export(work, dest):
    ck = torch.load(os.path.join(work, "best.pt"))
    cfg, state = ck["cfg"], ck["state"]
    W = hf_weights(ck["model"], cfg)
    name = os.path.basename(os.path.normpath(dest))
    os.makedirs(dest, exist_ok=True)
    hd = cfg["dim"] // cfg["n_heads"]
    pieces, scores, types, sp = sp_vocab(os.path.join(work, "tokenizer.model"))
    # GGUF
    a = "llama."
    kvs = [("general.architecture", "str", "llama"), ("general.name", "str", name), ("general.file_type", "u32", 1),
           (a + "context_length", "u32", cfg["max_seq_len"]), (a + "embedding_length", "u32", cfg["dim"]),
           (a + "block_count", "u32", cfg["n_layers"]), (a + "feed_forward_length", "u32", cfg["ffn_dim"]),
           (a + "attention.head_count", "u32", cfg["n_heads"]), (a + "attention.head_count_kv", "u32", cfg["n_kv_heads"]),
           (a + "attention.layer_norm_rms_epsilon", "f32", cfg["norm_eps"]), (a + "rope.freq_base", "f32", cfg["rope_theta"]),
           (a + "rope.dimension_count", "u32", hd), (a + "vocab_size", "u32", cfg["vocab_size"]),
           ("tokenizer.ggml.model", "str", "llama"), ("tokenizer.ggml.tokens", ("arr", "str"), pieces),
           ("tokenizer.ggml.scores", ("arr", "f32"), scores), ("tokenizer.ggml.token_type", ("arr", "i32"), types),
           ("tokenizer.ggml.bos_token_id", "u32", sp.bos_id()), ("tokenizer.ggml.eos_token_id", "u32", sp.eos_id()),
           ("tokenizer.ggml.unknown_token_id", "u32", sp.unk_id()), ("tokenizer.ggml.add_bos_token", "bool", True),
           ("tokenizer.ggml.add_eos_token", "bool", False), ("tokenizer.ggml.add_space_prefix", "bool", True),
           ("tokenizer.chat_template", "str", CHATML)]
    F16, F32 = mf.GGML_F16, mf.GGML_F32
    # Norms are stored as F32 (llama.cpp's convention) but hold the F16-rounded
    # values of the HF export, so both exports compute the same logits.
    W = {k: (v.astype(np.float16).astype(np.float32) if v.ndim == 1 else v) for k, v in W.items()}
    T = [("token_embd.weight", W["model.embed_tokens.weight"], F16), ("output_norm.weight", W["model.norm.weight"], F32),
         ("output.weight", W["lm_head.weight"], F16)]
    for i in range(cfg["n_layers"]):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        T += [(b + "attn_norm.weight", W[p + "input_layernorm.weight"], F32),
              (b + "attn_q.weight", mf.permute_for_gguf(W[p + "self_attn.q_proj.weight"], cfg["n_heads"]), F16),
              (b + "attn_k.weight", mf.permute_for_gguf(W[p + "self_attn.k_proj.weight"], cfg["n_kv_heads"]), F16),
              (b + "attn_v.weight", W[p + "self_attn.v_proj.weight"], F16),
              (b + "attn_output.weight", W[p + "self_attn.o_proj.weight"], F16),
              (b + "ffn_norm.weight", W[p + "post_attention_layernorm.weight"], F32),
              (b + "ffn_gate.weight", W[p + "mlp.gate_proj.weight"], F16),
              (b + "ffn_up.weight", W[p + "mlp.up_proj.weight"], F16),
              (b + "ffn_down.weight", W[p + "mlp.down_proj.weight"], F16)]
    mf.write_gguf(os.path.join(dest, name + ".gguf"), kvs, T)
    # Hugging Face folder
    hf = os.path.join(dest, "hf")
    os.makedirs(hf, exist_ok=True)
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": cfg["vocab_size"],
                   "hidden_size": cfg["dim"], "intermediate_size": cfg["ffn_dim"], "num_hidden_layers": cfg["n_layers"],
                   "num_attention_heads": cfg["n_heads"], "num_key_value_heads": cfg["n_kv_heads"],
                   "max_position_embeddings": cfg["max_seq_len"], "rms_norm_eps": cfg["norm_eps"],
                   "rope_theta": cfg["rope_theta"], "tie_word_embeddings": False, "hidden_act": "silu",
                   "bos_token_id": sp.bos_id(), "eos_token_id": sp.eos_id(), "torch_dtype": "float16"}, f, indent=2)
    with open(os.path.join(hf, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": sp.bos_id(), "eos_token_id": sp.eos_id()}, f, indent=2)
    with open(os.path.join(hf, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                   "add_bos_token": True, "add_eos_token": False, "chat_template": CHATML}, f, indent=2)
    mf.write_safetensors(os.path.join(hf, "model.safetensors"), W, "F16")
    shutil.copy(os.path.join(work, "tokenizer.model"), os.path.join(hf, "tokenizer.model"))
    # The held-out split as the model saw text in training: SentencePiece's
    # default nmt_nfkc normalization turned newlines into spaces, so verses and
    # chapters are joined by single spaces (infera tokenizes this identically).
    with open(os.path.join(work, "heldout.txt")) as f:
        held = " ".join(f.read().split())
    with open(os.path.join(dest, "heldout.txt"), "w") as f:
        f.write(held)
    shutil.copy(os.path.join(work, "train.log"), os.path.join(dest, "train.log"))
    with open(os.path.join(dest, "training.json"), "w") as f:
        json.dump({"steps": state["step"], "minutes": round(state["seconds"] / 60, 1),
                   "best_heldout_loss": state["best"], "train_loss_at_best": ck.get("train_loss")}, f, indent=2)
    print("exported", dest)


@torch.no_grad()
def perplexity(model, sp, text, ctx, max_chunks=None):
    """llama-perplexity's method, as infera implements it: BOS + tokens, cut
    into chunks of ctx, first token of each chunk replaced by BOS, the second
    half of each chunk scored."""
    import torch.nn.functional as F
    tokens = [sp.bos_id()] + sp.encode(text)
    n = len(tokens) // ctx
    if max_chunks:
        n = min(n, max_chunks)
    nll, count = 0.0, 0
    first = ctx // 2
    model.eval()
    for c in range(n):
        chunk = list(tokens[c * ctx:(c + 1) * ctx])
        orig = list(chunk)
        chunk[0] = sp.bos_id()
        logp = F.log_softmax(model(torch.tensor([chunk]))[0].double(), dim=-1)
        for j in range(first, ctx - 1):
            nll -= logp[j, orig[j + 1]].item()
            count += 1
    return math.exp(nll / count), count, n


def evaluate(work, dest, ctx=128):
    """Held-out perplexity of the exported (F16-rounded) weights, by the tool."""
    import sentencepiece as spm
    from model import Config, Llama
    ck = torch.load(os.path.join(work, "best.pt"))
    model = Llama(Config(**ck["cfg"]))
    model.load_state_dict({k: v.half().float() for k, v in ck["model"].items()})
    sp = spm.SentencePieceProcessor(model_file=os.path.join(work, "tokenizer.model"))
    with open(os.path.join(dest, "heldout.txt")) as f:
        text = f.read()
    ppl, count, n = perplexity(model, sp, text, ctx)
    result = {"heldout_ppl": ppl, "ctx": ctx, "chunks": n, "tokens_scored": count,
              "method": "llama-perplexity (BOS per chunk, second half scored), F16-rounded weights"}
    with open(os.path.join(dest, "tool_eval.json"), "w") as f:
        json.dump(result, f, indent=2)
    print("training tool's held-out evaluation:", result)
    return result
