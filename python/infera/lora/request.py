"""vLLM's `from vllm.lora.request import LoRARequest`, as `from infera.lora.request import LoRARequest`."""
from .._infera import LoRARequest

__all__ = ["LoRARequest"]
