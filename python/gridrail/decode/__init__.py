"""Decoding under a guide: the GRID-owned loop (mode 1) with its model adapters (transformers:
`hf.CausalLMLogits`, llama.cpp: `llama_model.LlamaLogits`) and processors for host loops
(modes 2 and 3: transformers, llama.cpp), paper Proposition 9."""

from gridrail.decode.logits import Sampler
from gridrail.decode.loop import Generation, NextLogits, generate
from gridrail.decode.row import GuardedRow, UnmaskedTokenError

__all__ = ["Generation", "GuardedRow", "NextLogits", "Sampler", "UnmaskedTokenError", "generate"]
