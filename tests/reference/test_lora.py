"""LoRA adapters: infera's logits with an adapter applied at run time vs the
numpy reference forward pass of the merged weights W + scale * alpha / r * B A,
for llama.cpp's GGUF adapter files and PEFT folders, on F32 and quantized
(Q8_0) base models; adapters off, scaled and combined; through the engine's
batch (full prompt) and decode (one token per step) paths."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "py"))
import model_files as mf  # noqa: E402
import reference as ref  # noqa: E402
from test_reference import make_model, max_rel_err, write_gguf  # noqa: E402

INFERA = os.environ.get("INFERA_BIN", "build/tools/infera")

# HF module -> GGUF matrix name.
TARGETS = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
           "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
           "mlp.down_proj": "ffn_down"}


def make_lora(cfg, W, seed, rank, alpha, targets=tuple(TARGETS)):
    """{(layer, module): (A [r, n_in], B [n_out, r])} in HF layout, with
    updates large enough to move the logits clearly."""
    rng = np.random.default_rng(seed)
    out = {}
    for l in range(cfg["num_hidden_layers"]):
        for m in targets:
            n_out, n_in = W[f"model.layers.{l}.{m}.weight"].shape
            r = rank if (l + len(m)) % 2 else max(1, rank // 2)  # ranks differ between matrices
            a = (rng.standard_normal((r, n_in)) / np.sqrt(n_in)).astype(np.float32)
            b = (rng.standard_normal((n_out, r)) * 0.5 / np.sqrt(r)).astype(np.float32)
            out[(l, m)] = (a, b)
    return out


def merged(W, lora, alpha, scale):
    out = {k: v.astype(np.float64) for k, v in W.items()}
    for (l, m), (a, b) in lora.items():
        out[f"model.layers.{l}.{m}.weight"] += scale * alpha / a.shape[0] * (b.astype(np.float64) @ a)
    return out


def write_gguf_adapter(path, cfg, lora, alpha, arch="llama", gtype=mf.GGML_F32):
    """As llama.cpp's convert_lora_to_gguf.py writes it: Q/K rows of B in GGUF's rotary order."""
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    kvs = [("general.architecture", "str", arch), ("general.type", "str", "adapter"),
           ("adapter.type", "str", "lora"), ("adapter.lora.alpha", "f32", float(alpha))]
    T = []
    for (l, m), (a, b) in sorted(lora.items()):
        if m == "self_attn.q_proj":
            b = mf.permute_for_gguf(b, H)
        elif m == "self_attn.k_proj":
            b = mf.permute_for_gguf(b, KV)
        name = f"blk.{l}.{TARGETS[m]}.weight"
        T += [(name + ".lora_a", a, gtype), (name + ".lora_b", b, gtype)]
    mf.write_gguf(path, kvs, T)


def write_peft(folder, lora, alpha, rslora=False):
    """As Hugging Face's peft saves a LoRA adapter (HF layout, no permutation)."""
    os.makedirs(folder, exist_ok=True)
    ranks = {a.shape[0] for a, _ in lora.values()}
    with open(os.path.join(folder, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": max(ranks), "lora_alpha": alpha, "task_type": "CAUSAL_LM",
                   "use_rslora": rslora, "target_modules": sorted({m.split(".")[1] for _, m in lora})}, f)
    T = {}
    for (l, m), (a, b) in lora.items():
        p = f"base_model.model.model.layers.{l}.{m}"
        T[p + ".lora_A.weight"] = a
        T[p + ".lora_B.weight"] = b
    mf.write_safetensors(os.path.join(folder, "adapter_model.safetensors"), T)


def logits(model, tokens, *args, mode="full"):
    with tempfile.NamedTemporaryFile(suffix=".f32") as out:
        r = subprocess.run([INFERA, "--log-level", "warn", "eval-logits", "--model", model,
                            "--tokens", " ".join(map(str, tokens)), "--mode", mode, "--out", out.name, *args],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError(r.stderr)
        return np.fromfile(out.name, dtype=np.float32).reshape(len(tokens), -1)


class LoraTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.tmp.name
        cls.cfg, cls.W = make_model("llama", dict(num_attention_heads=4, num_key_value_heads=2), seed=21)
        cls.tokens = [int(t) for t in np.random.default_rng(22).integers(0, cls.cfg["vocab_size"], 20)]
        cls.base = os.path.join(d, "base.gguf")
        write_gguf(cls.base, cls.cfg, cls.W)
        cls.alpha = 8.0
        cls.lora = make_lora(cls.cfg, cls.W, seed=23, rank=4, alpha=cls.alpha)
        cls.gguf = os.path.join(d, "adapter.gguf")
        write_gguf_adapter(cls.gguf, cls.cfg, cls.lora, cls.alpha)
        cls.peft = os.path.join(d, "peft-adapter")
        write_peft(cls.peft, cls.lora, cls.alpha)
        # A second adapter on the attention only, without alpha (scale taken as 1 per rank).
        cls.lora2 = make_lora(cls.cfg, cls.W, seed=24, rank=2, alpha=0,
                              targets=("self_attn.q_proj", "self_attn.v_proj"))
        cls.gguf2 = os.path.join(d, "attn-only.gguf")
        write_gguf_adapter(cls.gguf2, cls.cfg, cls.lora2, 0)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def expected(self, scale=1.0, scale2=0.0):
        w = merged(self.W, self.lora, self.alpha, scale)
        for (l, m), (a, b) in self.lora2.items():  # alpha 0: alpha / r taken as 1
            w[f"model.layers.{l}.{m}.weight"] += scale2 * (b.astype(np.float64) @ a)
        return ref.forward(self.cfg, w, self.tokens)

    def test_gguf_adapter_matches_merged_weights(self):
        want = self.expected()
        base = ref.forward(self.cfg, {k: v.astype(np.float64) for k, v in self.W.items()}, self.tokens)
        self.assertGreater(max_rel_err(base, want), 0.05)  # the adapter changes the logits clearly
        for mode in ("full", "incremental", "chunk:7"):
            got = logits(self.base, self.tokens, "--lora", self.gguf, mode=mode)
            err = max_rel_err(got, want)
            self.assertLess(err, 1e-4, f"{mode}: max relative error {err:.2e}")
        # Without it: the base model, exactly as before.
        self.assertLess(max_rel_err(logits(self.base, self.tokens), base), 1e-4)

    def test_peft_folder_matches_gguf(self):
        want = self.expected()
        for path in (self.peft, os.path.join(self.peft, "adapter_config.json")):
            got = logits(self.base, self.tokens, "--lora", path)
            self.assertLess(max_rel_err(got, want), 1e-4, path)

    def test_info_describes_both_kinds(self):
        for path, kind in ((self.gguf, "GGUF v3 (a lora adapter"), (self.peft, "PEFT folder (a LORA adapter")):
            r = subprocess.run([INFERA, "info", path], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(kind, r.stdout)
            ranks = {}
            for a, _ in self.lora.values():
                ranks[a.shape[0]] = ranks.get(a.shape[0], 0) + 1
            want = ", ".join(f"{k} ({n} matrices)" for k, n in sorted(ranks.items()))
            self.assertIn(f"ranks:             {want}\n", r.stdout)
            self.assertIn("alpha:             8", r.stdout)
        # A PEFT folder whose config is not JSON, or without its weights: one error line, exit 2.
        for name, files in (("badjson", {"adapter_config.json": "not json"}),
                            ("noweights", {"adapter_config.json": '{"peft_type": "LORA", "lora_alpha": 8}'})):
            folder = os.path.join(self.tmp.name, "info-" + name)
            os.makedirs(folder, exist_ok=True)
            for f, text in files.items():
                with open(os.path.join(folder, f), "w") as out:
                    out.write(text)
            r = subprocess.run([INFERA, "info", folder], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, (name, r.stderr))
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)

    def test_rslora_scales_by_the_root_of_the_rank(self):
        folder = os.path.join(self.tmp.name, "rslora")
        write_peft(folder, self.lora, self.alpha, rslora=True)
        w = {k: v.astype(np.float64) for k, v in self.W.items()}
        for (l, m), (a, b) in self.lora.items():
            w[f"model.layers.{l}.{m}.weight"] += self.alpha / np.sqrt(a.shape[0]) * (b.astype(np.float64) @ a)
        got = logits(self.base, self.tokens, "--lora", folder)
        self.assertLess(max_rel_err(got, ref.forward(self.cfg, w, self.tokens)), 1e-4)

    def test_scaled_combined_and_off(self):
        got = logits(self.base, self.tokens, "--lora-scaled", f"{self.gguf}:0.5")
        self.assertLess(max_rel_err(got, self.expected(0.5)), 1e-4)
        # llama.cpp's older two-word form, a negative scale, two adapters at once.
        got = logits(self.base, self.tokens, "--lora-scaled", self.gguf, "-0.75", "--lora", self.gguf2)
        self.assertLess(max_rel_err(got, self.expected(-0.75, 1.0)), 1e-4)
        # Loaded but not applied: the base model.
        base = logits(self.base, self.tokens)
        off = logits(self.base, self.tokens, "--lora", self.gguf, "--lora-init-without-apply")
        np.testing.assert_array_equal(off, base)

    def test_quantized_base(self):
        # Q8_0 base weights: the update runs in f32 beside the integer kernels.
        q8 = os.path.join(self.tmp.name, "base-q8_0.gguf")
        subprocess.run([INFERA, "--log-level", "warn", "quantize", self.base, q8, "--type", "q8_0"], check=True,
                       capture_output=True)
        base_q = logits(q8, self.tokens)
        got = logits(q8, self.tokens, "--lora", self.gguf)
        want_delta = self.expected() - ref.forward(self.cfg, {k: v.astype(np.float64) for k, v in self.W.items()},
                                                   self.tokens)
        # The adapter moves the quantized model's logits as it moves the float model's.
        err = max_rel_err(got - base_q, want_delta)
        self.assertLess(err, 0.05, f"{err:.3f}")

    def test_bad_adapters_are_clear_errors(self):
        d = self.tmp.name

        def refused(path, needle):
            r = subprocess.run([INFERA, "eval-logits", "--model", self.base, "--tokens", "1 2", "--lora", path],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, r.stderr)
            lines = r.stderr.strip().splitlines()
            self.assertIn(needle, lines[-1], r.stderr)

        # A model file, not an adapter.
        refused(self.base, "is not a LoRA adapter")
        # Another architecture.
        other = os.path.join(d, "qwen2-adapter.gguf")
        write_gguf_adapter(other, self.cfg, self.lora, self.alpha, arch="qwen2")
        refused(other, "'qwen2'")
        # Shapes that do not fit the model.
        cfg_big, W_big = make_model("llama", dict(num_attention_heads=4, num_key_value_heads=2,
                                                  intermediate_size=200), seed=25)
        wrong = os.path.join(d, "wrong-shape.gguf")
        write_gguf_adapter(wrong, cfg_big, make_lora(cfg_big, W_big, 26, 4, 8.0), 8.0)
        refused(wrong, "the model's matrix")
        # An embedding update (not supported).
        emb = os.path.join(d, "embd.gguf")
        mf.write_gguf(emb, [("general.architecture", "str", "llama"), ("general.type", "str", "adapter"),
                            ("adapter.type", "str", "lora"), ("adapter.lora.alpha", "f32", 8.0)],
                      [("token_embd.weight.lora_a", np.zeros((4, 64), np.float32), mf.GGML_F32),
                       ("token_embd.weight.lora_b", np.zeros((96, 4), np.float32), mf.GGML_F32)])
        refused(emb, "not supported")
        refused(os.path.join(d, "missing.gguf"), "missing.gguf")
        # The adapter given as the model.
        r = subprocess.run([INFERA, "eval-logits", "--model", self.gguf, "--tokens", "1 2"], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("is a lora adapter, not a model", r.stderr.strip().splitlines()[-1])
        # DoRA, and a config that is not what PEFT writes.
        for name, cfg in (("dora", {"peft_type": "LORA", "lora_alpha": 8, "use_dora": True}),
                          ("odd", {"peft_type": 7, "lora_alpha": "x"})):
            folder = os.path.join(d, name)
            write_peft(folder, self.lora, self.alpha)
            with open(os.path.join(folder, "adapter_config.json"), "w") as f:
                json.dump(cfg, f)
            refused(folder, "adapter_config.json")
        # A truncated file.
        cut = os.path.join(d, "cut.gguf")
        with open(self.gguf, "rb") as f, open(cut, "wb") as g:
            g.write(f.read()[:300])
        refused(cut, "cut.gguf")


if __name__ == "__main__":
    unittest.main()
