"""LoRA adapters for the Python API (vLLM's module path, vllm.lora)."""
