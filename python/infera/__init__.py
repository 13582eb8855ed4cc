"""infera's Python API: offline batch generation on infera's C++ engine, with
vLLM's interface.

    from infera import LLM, SamplingParams
    llm = LLM(model="model.gguf", max_num_seqs=64)
    for out in llm.generate(["Hello", "Once upon a time"], SamplingParams(temperature=0.7, top_p=0.9, max_tokens=100)):
        print(out.prompt, out.outputs[0].text)

LoRA adapters as vLLM takes them: LLM(model=..., enable_lora=True, max_loras=2), then
llm.generate(prompts, params, lora_request=LoRARequest("sql", 1, "/adapters/sql"))
(also importable as vLLM's path: from infera.lora.request import LoRARequest).

The engine runs with the GIL released; see docs/api.md ("Python API").
"""
from ._infera import (LLM, CompletionOutput, EmbeddingOutput, EmbeddingRequestOutput, GuidedDecodingParams,
                      Logprob, LoRARequest, RequestOutput, SamplingParams, Stream, __version__)

__all__ = ["LLM", "SamplingParams", "GuidedDecodingParams", "LoRARequest", "RequestOutput", "CompletionOutput", "EmbeddingRequestOutput", "EmbeddingOutput",
           "Logprob", "Stream", "__version__"]
