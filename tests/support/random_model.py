"""A language model whose logits are noise drawn from what it has read: the same prompt and
the same tokens give the same logits in every process (seeded by CRC-32, never by `hash`), so
two runs of `ask` can only differ where gridrail itself is not deterministic."""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence

import numpy as np

from gridrail.models import LanguageModel
from gridrail.vocab import Vocabulary


class NoiseModel(LanguageModel):
    """Noise, plus `lean` on the tokens that spell a word of `words` (or the start of one), so
    that the noise writes those words more often than chance would."""

    def __init__(
        self, vocab: Vocabulary, words: Sequence[str] = (), scale: float = 4.0, lean: float = 8.0
    ):
        super().__init__("noise", None, None, vocab)
        self.scale = scale
        self.bias = np.zeros(vocab.size)
        for token, spelling in enumerate(vocab.all_token_bytes):
            text = (spelling or b"").strip().lower()
            if text and any(w.encode().startswith(text) for w in words):
                self.bias[token] = lean

    def prompt_ids(self, messages: list[dict[str, str]], prefix: str = "") -> list[int]:
        text = json.dumps([messages, prefix], sort_keys=True).encode()
        return [zlib.crc32(text) % self.vocab.size]

    def next_logits(self, prompt_ids: list[int]):
        def logits(generated: Sequence[int]) -> np.ndarray:
            seen = np.asarray([*prompt_ids, *generated], dtype="<i8").tobytes()
            rng = np.random.default_rng(zlib.crc32(seen))
            return rng.standard_normal(self.vocab.size) * self.scale + self.bias

        return logits
