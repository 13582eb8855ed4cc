"""The Python API (`from infera import LLM, SamplingParams`) on the bundled
model: batched generation equals each prompt alone and the CLI's greedy text;
seeded sampling reproduces; chat uses the model's template; streaming pieces
add up to the whole; the GIL is released while the engine runs; Ctrl-C-free
cancellation (a stream dropped early) frees the engine; embeddings equal the
numpy reference's pooled hidden states; LoRA adapters by vLLM's
LoRARequest equal `infera eval-logits --lora`, loaded on first use and the
least recently used unloaded when slots run out; bad arguments raise
ValueError."""
import json
import os
import subprocess
import sys
import threading
import time
import unittest

from infera import LLM, SamplingParams

INFERA = os.environ.get("INFERA_BIN", "build/tools/infera")
PROMPTS = ["In the beginning", "And the LORD said unto Moses", "Blessed are the", "For God so loved"]


class PythonApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.llm = LLM(max_num_seqs=8, threads=2)

    def test_batch_equals_alone_and_cli(self):
        greedy = SamplingParams(temperature=0, max_tokens=12)
        batch = self.llm.generate(PROMPTS, greedy)
        self.assertEqual(len(batch), len(PROMPTS))
        for p, out in zip(PROMPTS, batch):
            self.assertEqual(out.prompt, p)
            self.assertTrue(out.finished)
            self.assertEqual(out.prompt_token_ids, self.llm.encode(p))
            c = out.outputs[0]
            self.assertEqual(c.index, 0)
            self.assertEqual(c.finish_reason, "length")
            self.assertEqual(len(c.token_ids), 12)
            alone = self.llm.generate(p, greedy)[0].outputs[0]
            self.assertEqual((alone.text, alone.token_ids), (c.text, c.token_ids))
            self.assertEqual(self.llm.decode(c.token_ids).strip(), c.text.strip())
        # The CLI's offline batch gives the same greedy text.
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            inp, outp = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
            with open(inp, "w") as f:
                for p in PROMPTS:
                    f.write(json.dumps({"prompt": p, "max_tokens": 12, "temperature": 0}) + "\n")
            r = subprocess.run([INFERA, "generate", "--input", inp, "--output", outp, "-t", "2"], capture_output=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(outp) as f:
                cli = [json.loads(line) for line in f]
        for line, out in zip(cli, batch):
            self.assertEqual(line["text"], out.outputs[0].text)

    def test_sampling_seed_n_and_logprobs(self):
        sp = SamplingParams(temperature=0.9, top_p=0.95, max_tokens=10, seed=7, n=3, logprobs=2)
        a = self.llm.generate(PROMPTS[:2], sp)
        b = self.llm.generate(PROMPTS[:2], sp)
        for x, y in zip(a, b):
            self.assertEqual(len(x.outputs), 3)
            self.assertEqual([c.text for c in x.outputs], [c.text for c in y.outputs])
            self.assertEqual(len({c.text for c in x.outputs}), 3)  # seeds differ per choice
            for c in x.outputs:
                self.assertEqual(len(c.logprobs), len(c.token_ids))
                for tok, lp in zip(c.token_ids, c.logprobs):
                    self.assertIn(tok, lp)
                    self.assertLessEqual(lp[tok].logprob, 0.0)
                    # vLLM's Logprob: the top two ranked 1 and 2, the token's rank and text.
                    top = sorted(lp.values(), key=lambda v: -v.logprob)
                    self.assertEqual([v.rank for v in top[:2]], [1, 2])
                    self.assertGreaterEqual(lp[tok].rank, 1)
                self.assertTrue(c.text.startswith(c.logprobs[0][c.token_ids[0]].decoded_token), c.text)
                self.assertAlmostEqual(c.cumulative_logprob,
                                       sum(lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)), places=3)
        # One SamplingParams per prompt; stop strings.
        outs = self.llm.generate(PROMPTS[:2], [SamplingParams(temperature=0, max_tokens=3),
                                               SamplingParams(temperature=0, max_tokens=30, stop=[" the"])])
        self.assertEqual(len(outs[0].outputs[0].token_ids), 3)
        self.assertNotIn(" the", outs[1].outputs[0].text)
        # vLLM's stop_reason: the stop string, else None.
        self.assertEqual((outs[1].outputs[0].finish_reason, outs[1].outputs[0].stop_reason), ("stop", " the"))
        self.assertIsNone(outs[0].outputs[0].stop_reason)

    def test_prompt_logprobs(self):
        """vLLM's prompt_logprobs: RequestOutput.prompt_logprobs is None for
        the first prompt token, then {id: Logprob} of each prompt token and
        the k most likely; once per prompt, however many choices."""
        sp = SamplingParams(temperature=0.8, seed=1, n=2, max_tokens=2, prompt_logprobs=3)
        out = self.llm.generate(PROMPTS[1], sp)[0]
        pl = out.prompt_logprobs
        self.assertEqual(len(pl), len(out.prompt_token_ids))
        self.assertIsNone(pl[0])
        for tok, entry in zip(out.prompt_token_ids[1:], pl[1:]):
            self.assertIn(tok, entry)
            self.assertIn(len(entry), (3, 4))  # the top 3, and the prompt token if not among them
            ranked = sorted(entry.values(), key=lambda v: -v.logprob)
            self.assertEqual([v.rank for v in ranked[:3]], [1, 2, 3])
            if entry[tok].rank > 3:
                self.assertLess(entry[tok].logprob, ranked[2].logprob)
        # The same numbers as the prompt of a generation one token shorter: its first sampled token's.
        prefix = self.llm.decode(out.prompt_token_ids[1:3])
        g = self.llm.generate(prefix, SamplingParams(temperature=0, max_tokens=1, logprobs=3))[0]
        self.assertEqual(g.prompt_token_ids, out.prompt_token_ids[:3])
        first = g.outputs[0].logprobs[0]
        top3 = {t: v.logprob for t, v in first.items() if v.rank <= 3}
        self.assertEqual(top3.keys(), {t for t, v in pl[3].items() if v.rank <= 3})
        for t, l in top3.items():
            self.assertAlmostEqual(pl[3][t].logprob, l, places=4)
        self.assertIsNone(self.llm.generate(PROMPTS[1], SamplingParams(max_tokens=1))[0].prompt_logprobs)
        self.assertRaises(ValueError, SamplingParams, prompt_logprobs=21)

    def test_vllm_prompt_forms(self):
        """vLLM's prompt forms: a string, TextPrompt {"prompt"} and
        TokensPrompt {"prompt_token_ids"} (its RequestOutput.prompt None),
        alone or mixed in a list; the same text for the same tokens."""
        sp = SamplingParams(temperature=0, max_tokens=8)
        ids = self.llm.encode(PROMPTS[0])
        outs = self.llm.generate([PROMPTS[0], {"prompt": PROMPTS[0]}, {"prompt_token_ids": ids}], sp)
        self.assertEqual(len({o.outputs[0].text for o in outs}), 1)
        self.assertEqual([o.prompt for o in outs], [PROMPTS[0], PROMPTS[0], None])
        self.assertEqual([o.prompt_token_ids for o in outs], [ids] * 3)
        one = self.llm.generate({"prompt_token_ids": ids[:3]}, sp)
        self.assertEqual(one[0].prompt_token_ids, ids[:3])
        for bad, exc in (({"prompt_token_ids": []}, ValueError), ({"text": "x"}, ValueError),
                         ({"prompt_token_ids": [10 ** 6]}, ValueError), (3, TypeError), ([{"x": 1}], ValueError)):
            self.assertRaises(exc, self.llm.generate, bad, sp)

    def test_vllm_options(self):
        """vLLM's stop_token_ids (stop_reason: the id; not in the output),
        detokenize=False (token ids only), LLM(seed=) reproducing unseeded
        sampling across instances, and its GPU options accepted or refused."""
        greedy = SamplingParams(temperature=0, max_tokens=12)
        full = self.llm.generate(PROMPTS[1], greedy)[0].outputs[0]
        stop_at = full.token_ids[5]
        first = full.token_ids.index(stop_at)
        cut = self.llm.generate(PROMPTS[1], SamplingParams(temperature=0, max_tokens=12,
                                                           stop_token_ids=[stop_at]))[0].outputs[0]
        self.assertEqual(cut.token_ids, full.token_ids[:first])
        self.assertEqual((cut.finish_reason, cut.stop_reason), ("stop", stop_at))
        self.assertEqual(cut.text, self.llm.decode(full.token_ids[:first]) if first else "")
        # min_tokens masks them until it is reached.
        later = self.llm.generate(PROMPTS[1], SamplingParams(temperature=0, max_tokens=12, min_tokens=first + 1,
                                                             stop_token_ids=[stop_at]))[0].outputs[0]
        self.assertGreater(len(later.token_ids), first)
        bare = self.llm.generate(PROMPTS[1], SamplingParams(temperature=0, max_tokens=12, detokenize=False),
                                 use_tqdm=False)[0].outputs[0]
        self.assertEqual((bare.token_ids, bare.text), (full.token_ids, ""))
        self.assertRaises(ValueError, SamplingParams, detokenize=False, stop=["x"])
        self.assertRaises(ValueError, SamplingParams, spaces_between_special_tokens=False)
        word = full.text.split()[2]
        kept = self.llm.generate(PROMPTS[1], SamplingParams(temperature=0, max_tokens=12, stop=[word],
                                                            include_stop_str_in_output=True))[0].outputs[0]
        self.assertTrue(kept.text.endswith(word) and full.text.startswith(kept.text), (kept.text, full.text))
        self.assertEqual(kept.stop_reason, word)
        self.assertRaises(ValueError, self.llm.generate, PROMPTS[0], SamplingParams(stop_token_ids=[10 ** 6]))
        sampled = SamplingParams(temperature=1.0, max_tokens=16)
        a, b = (LLM(max_num_seqs=2, seed=5, dtype="float16", gpu_memory_utilization=0.5) for _ in range(2))
        self.assertEqual([o.outputs[0].text for o in a.generate(PROMPTS, sampled)],
                         [o.outputs[0].text for o in b.generate(PROMPTS, sampled)])
        self.assertRaises(ValueError, LLM, tensor_parallel_size=2)

    def test_chat_and_streaming(self):
        msgs = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Who made the light?"}]
        greedy = SamplingParams(temperature=0, max_tokens=16)
        out = self.llm.chat(msgs, greedy)[0].outputs[0]
        self.assertTrue(out.text)
        pieces = list(self.llm.stream_chat(msgs, greedy))
        self.assertGreater(len(pieces), 1)
        self.assertEqual("".join(pieces), out.text)
        whole = self.llm.generate(PROMPTS[0], greedy)[0].outputs[0].text
        self.assertEqual("".join(self.llm.stream(PROMPTS[0], greedy)), whole)
        # Two conversations at once.
        two = self.llm.chat([msgs, [{"role": "user", "content": "Say amen."}]], greedy)
        self.assertEqual(two[0].outputs[0].text, out.text)

    def test_chat_jinja_tools_and_kwargs(self):
        # The bundled model's own template is Jinja (ChatML): tools and
        # chat_template_kwargs reach it; a template given as text replaces it.
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "data", "chat_templates", "qwen2.5-instruct.jinja")) as f:
            qwen = LLM(max_num_seqs=2, threads=2, chat_template=f.read())
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}}}}]
        msgs = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                                  "arguments": json.dumps({"city": "Paris"})}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
        p = SamplingParams(temperature=0, max_tokens=2)
        with_tools = qwen.chat(msgs, p, tools=tools)[0]
        text = qwen.decode(with_tools.prompt_token_ids)
        self.assertIn('"name": "get_weather"', text)           # the tool signature (tojson)
        self.assertIn('{"name": "get_weather", "arguments": {"city": "Paris"}}', text)  # the call, args as object
        self.assertIn("<tool_response>\nsunny\n</tool_response>", text)
        self.assertLess(len(qwen.chat(msgs[:1], p)[0].prompt_token_ids), len(with_tools.prompt_token_ids))
        echo = LLM(max_num_seqs=2, threads=2,
                   chat_template="{% for m in messages %}{{ m.content }}{% endfor %} {{ closing }}")
        out = echo.chat([{"role": "user", "content": "In the beginning"}], p, chat_template_kwargs={"closing": "Amen"})
        self.assertTrue(echo.decode(out[0].prompt_token_ids).endswith("Amen"))
        with self.assertRaises(ValueError):
            echo.chat([{"role": "user", "content": "x"}], p, tools={"not": "a list"})

    def test_stream_interleaved_with_generate_and_dropped(self):
        greedy = SamplingParams(temperature=0, max_tokens=20)
        want = self.llm.generate(PROMPTS[1], greedy)[0].outputs[0].text
        s = self.llm.stream(PROMPTS[1], greedy)
        first = next(s)
        # A generate() call in between steps the stream's request too; its
        # text is kept for the iterator.
        self.llm.generate(PROMPTS[2], greedy)
        self.assertEqual(first + "".join(s), want)
        # A stream abandoned early is cancelled; the engine is free again.
        s2 = self.llm.stream(PROMPTS[3], SamplingParams(temperature=0, max_tokens=50))
        next(s2)
        del s2
        self.assertEqual(self.llm.generate(PROMPTS[3], greedy)[0].outputs[0].text,
                         self.llm.generate(PROMPTS[3], greedy)[0].outputs[0].text)

    def test_gil_released_while_generating(self):
        ticks = 0
        stop = threading.Event()

        def count():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                time.sleep(0.001)

        t = threading.Thread(target=count)
        t.start()
        t0 = time.time()
        self.llm.generate(PROMPTS * 4, SamplingParams(temperature=0, max_tokens=64, ignore_eos=True))
        secs = time.time() - t0
        stop.set()
        t.join()
        # The counter thread ran during the call (it sleeps 1 ms per tick).
        self.assertGreater(ticks, 0.2 * secs / 0.001 * 0.2, (ticks, secs))
        # Two Python threads calling generate at once take turns safely.
        results = [None, None]

        def call(i):
            results[i] = self.llm.generate(PROMPTS[i], SamplingParams(temperature=0, max_tokens=8))[0].outputs[0].text

        ts = [threading.Thread(target=call, args=(i,)) for i in range(2)]
        for x in ts:
            x.start()
        for x in ts:
            x.join()
        for i in range(2):
            self.assertEqual(results[i],
                             self.llm.generate(PROMPTS[i], SamplingParams(temperature=0, max_tokens=8))[0].outputs[0].text)

    def test_embed_matches_reference_batched_or_alone(self):
        import numpy as np
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(here, "..", "reference"))
        sys.path.insert(0, os.path.join(here, "..", "..", "tools", "py"))
        import model_files as mf
        import reference as ref
        hf = os.path.join(here, "..", "..", "models", "kjv-7m", "hf")
        with open(os.path.join(hf, "config.json")) as f:
            cfg = json.load(f)
        cfg["head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]
        W = mf.read_safetensors(os.path.join(hf, "model.safetensors"))
        for pooling in ("last", "mean"):
            batch = self.llm.embed(PROMPTS, pooling=pooling)
            self.assertEqual(len(batch), len(PROMPTS))
            for p, out in zip(PROMPTS, batch):
                self.assertTrue(out.finished)
                self.assertEqual(out.prompt_token_ids, self.llm.encode(p))
                alone = self.llm.embed(p, pooling=pooling)[0].outputs.embedding
                self.assertEqual(out.outputs.embedding, alone)
                hidden = []
                ref.forward(cfg, W, out.prompt_token_ids, hidden=hidden)
                want = hidden[0][-1] if pooling == "last" else hidden[0].mean(axis=0)
                want = want / np.linalg.norm(want)
                got = np.array(out.outputs.embedding)
                self.assertLess(float(np.max(np.abs(got - want))), 1e-4 * float(np.max(np.abs(want))))
        raw = np.array(self.llm.embed(PROMPTS[0], normalize=False)[0].outputs.embedding)
        self.assertGreater(abs(float(np.linalg.norm(raw)) - 1.0), 1e-3)
        with self.assertRaises(ValueError):
            self.llm.embed("x", pooling="max")
        with self.assertRaises(ValueError):  # longer than the context
            self.llm.embed("word " * (self.llm.max_model_len + 10))

    def test_guided_decoding(self):
        from infera import GuidedDecodingParams
        schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                                   "age": {"type": "integer", "minimum": 0}},
                  "required": ["name", "age"], "additionalProperties": False}
        outs = self.llm.generate(PROMPTS, SamplingParams(max_tokens=120, seed=5,
                                                         guided_decoding=GuidedDecodingParams(json=schema)))
        for o in outs:
            got = json.loads(o.outputs[0].text)
            self.assertEqual(sorted(got), ["age", "name"])
            self.assertIsInstance(got["age"], int)
            self.assertGreaterEqual(got["age"], 0)
        choice = GuidedDecodingParams(choice=["Amen", "Selah"])
        for o in self.llm.generate(PROMPTS, SamplingParams(max_tokens=10, guided_decoding=choice)):
            self.assertIn(o.outputs[0].text, ["Amen", "Selah"])
        regex = SamplingParams(max_tokens=20, guided_decoding=GuidedDecodingParams(regex=r"[0-9]{3}-[a-z]{2}"))
        self.assertRegex(self.llm.generate("x", regex)[0].outputs[0].text, r"^[0-9]{3}-[a-z]{2}$")
        for kw in ({}, {"regex": "a", "choice": ["b"]}, {"grammar": "root ::= x"}, {"json": {"pattern": "a"}}):
            with self.assertRaises(ValueError, msg=kw):
                GuidedDecodingParams(**kw)

    def test_bad_arguments(self):
        for kw in ({"temperature": -1}, {"top_p": 0}, {"max_tokens": 0}, {"n": 0}, {"logprobs": 50}):
            with self.assertRaises(ValueError, msg=kw):
                SamplingParams(**kw)
        with self.assertRaises(ValueError):
            self.llm.generate(PROMPTS[:2], [SamplingParams()])
        with self.assertRaises(ValueError):
            self.llm.chat([{"role": "robot", "content": "x"}])
        with self.assertRaises(ValueError):
            self.llm.chat([{"role": "user"}])
        with self.assertRaises(ValueError):
            self.llm.decode([10 ** 9])
        with self.assertRaises(ValueError):  # longer than the context
            self.llm.generate("word " * (self.llm.max_model_len + 10), SamplingParams(max_tokens=4))
        with self.assertRaises((ValueError, RuntimeError)):
            LLM("/nonexistent/model.gguf")
        # The engine still serves after the refusals.
        self.assertTrue(self.llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=4))[0].outputs[0].text)


class LoraRequestTest(unittest.TestCase):
    """LLM(enable_lora=True, max_loras=1) with vLLM's LoRARequest."""

    @classmethod
    def setUpClass(cls):
        import tempfile
        here = os.path.dirname(os.path.abspath(__file__))
        for sub in ("e2e", os.path.join("..", "tools", "py"), os.path.join("..", "tools", "train")):
            sys.path.insert(0, os.path.normpath(os.path.join(here, "..", sub)))
        from test_lora_server import write_test_adapters
        cls.tmp = tempfile.TemporaryDirectory()
        cls.a, cls.b = write_test_adapters(cls.tmp.name)
        cls.llm = LLM(max_num_seqs=4, threads=2, enable_lora=True, max_loras=1)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def alone(self, prompt, *lora_args, n=12):
        from test_lora_server import greedy_alone
        return greedy_alone(self.llm.encode(prompt), *lora_args, n=n)

    def test_adapters_by_request_with_eviction(self):
        from infera.lora.request import LoRARequest as VllmPath
        from infera import LoRARequest
        self.assertIs(VllmPath, LoRARequest)
        greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
        ra, rb = LoRARequest("a", 1, self.a), LoRARequest("b", 2, self.b)
        self.assertEqual((ra.lora_name, ra.lora_int_id, ra.lora_path), ("a", 1, self.a))
        p = PROMPTS[0]
        base, with_a, with_b = self.alone(p), self.alone(p, "--lora", self.a), self.alone(p, "--lora", self.b)
        self.assertNotEqual(base, with_a)
        self.assertEqual(self.llm.generate(p, greedy, lora_request=ra)[0].outputs[0].token_ids, with_a)
        # One slot: b's first use unloads a, a's next use reloads it.
        self.assertEqual(self.llm.generate(p, greedy, lora_request=rb)[0].outputs[0].token_ids, with_b)
        self.assertEqual(self.llm.generate(p, greedy, lora_request=ra)[0].outputs[0].token_ids, with_a)
        # Per prompt: the adapter and the plain model in one batch.
        outs = self.llm.generate([p, p], greedy, lora_request=[ra, None])
        self.assertEqual([o.outputs[0].token_ids for o in outs], [with_a, base])
        chat = self.llm.chat([{"role": "user", "content": "Hi"}], greedy, lora_request=ra)
        self.assertEqual(len(chat[0].outputs[0].token_ids), 12)
        # Embeddings too: the adapter changes them; the same request alone or beside the plain one agrees.
        both = self.llm.embed([p, p], lora_request=[ra, None])
        self.assertEqual(both[0].outputs.embedding, self.llm.embed(p, lora_request=ra)[0].outputs.embedding)
        self.assertEqual(both[1].outputs.embedding, self.llm.embed(p)[0].outputs.embedding)
        self.assertNotEqual(both[0].outputs.embedding, both[1].outputs.embedding)

    def test_misuse(self):
        from infera import LoRARequest
        greedy = SamplingParams(temperature=0, max_tokens=2)
        ra, rb = LoRARequest("a", 1, self.a), LoRARequest("b", 2, self.b)
        for bad in ([ra, rb],                                   # two adapters, one slot
                    [ra, LoRARequest("a2", 1, self.b)],         # one id, two adapters
                    [LoRARequest("x", 3, self.tmp.name + "/none.gguf"), None]):
            with self.assertRaises(ValueError, msg=bad):
                self.llm.generate(PROMPTS[:2], greedy, lora_request=bad)
        with self.assertRaises(ValueError):
            LoRARequest("a", 0, self.a)
        with self.assertRaises(TypeError):
            self.llm.generate(PROMPTS[0], greedy, lora_request="a")
        with self.assertRaises(ValueError):  # one per prompt
            self.llm.generate(PROMPTS[:2], greedy, lora_request=[ra])
        plain = LLM(max_num_seqs=2, threads=1)
        with self.assertRaises(ValueError):
            plain.generate(PROMPTS[0], greedy, lora_request=ra)
        # Still serving.
        self.assertEqual(len(self.llm.generate(PROMPTS[0], greedy, lora_request=rb)[0].outputs[0].token_ids), 2)


if __name__ == "__main__":
    unittest.main()
