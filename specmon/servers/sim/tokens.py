"""How many tokens a text prompt is, as the simulated server counts it.

SGLang tokenizes text with the model's tokenizer (special tokens added, so a Llama prompt gains
its BOS). The simulator does the same when `--model-path` is a local folder holding a
`tokenizer.json` and the `tokenizers` package is installed; otherwise it estimates ~4
characters a token (+1 for the BOS). The estimate is far off for text that is not prose:
`bench_serving`'s random ids decoded by a tiny model's tokenizer came to ~1,470 estimated tokens
for 1,024 real ones. input_ids are always counted exactly.

The prefix cache needs the prompt as tokens, not just their number: `key()` gives them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

BOS_STANDIN = "<s>"  # the first stand-in token of every text prompt counted by the estimate


class TokenCounter:
    def __init__(self, model_path: Optional[str]):
        self._tokenizer = None
        self.source = "estimate: ~4 characters a token"
        folder = Path(model_path) if model_path else None
        if folder is not None and (folder / "tokenizer.json").is_file():
            try:
                from tokenizers import Tokenizer
            except ImportError:
                self.source = "estimate: the tokenizers package is not installed"
            else:
                self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
                self.source = str(folder / "tokenizer.json")

    @property
    def exact(self) -> bool:
        return self._tokenizer is not None

    def count(self, text: str) -> int:
        if self._tokenizer is not None:
            return max(1, len(self._tokenizer.encode(text).ids))
        return max(1, (len(text) + 3) // 4) + 1

    def key(self, text: str) -> tuple:
        """The prompt as a token sequence for the prefix cache, len(key) == count(text): the
        tokenizer's ids, else a BOS stand-in followed by the text in 4-character pieces (so two
        texts share as many leading "tokens" as they share leading 4-character pieces, and
        unrelated texts share the BOS, as unrelated prompts do on a real server)."""
        if self._tokenizer is not None:
            ids = tuple(self._tokenizer.encode(text).ids)
            return ids or (BOS_STANDIN,)
        key = (BOS_STANDIN,) + tuple(text[i:i + 4] for i in range(0, len(text), 4))
        return key + ("",) * (self.count(text) - len(key))
