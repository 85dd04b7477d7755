"""A local tokenizer for `--tokenizer` (text prompts of an exact length), never downloaded.

Two ways to read one, both optional packages imported only when asked for:
- `transformers` installed: AutoTokenizer on the folder, as the server loads it;
- otherwise the lighter `tokenizers` package on the folder's `tokenizer.json` (what every
  Hugging Face "fast" tokenizer ships; the simulator counts text with the same file). The
  special tokens it adds (a Llama BOS) are the ones its post-processor names.
`--tokenizer` may name the folder or the tokenizer.json in it. Whatever is missing is said in
one line (UsageError, exit 2) with the command that installs it.

The workload needs four things of a tokenizer, so the `tokenizers` one is wrapped to offer the
same: calling it on text (`add_special_tokens`) gives `{"input_ids": [...]}`, `decode(ids,
skip_special_tokens=True)`, `all_special_ids` and `vocab_size` (the vocabulary without added
tokens).
"""

from __future__ import annotations

from pathlib import Path

from specmon.errors import UsageError

_ELSE = "or leave --tokenizer out to send input_ids"


class JsonTokenizer:
    """A `tokenizers.Tokenizer` read from a tokenizer.json, shaped like the part of a
    transformers tokenizer the workload uses."""

    def __init__(self, tokenizer, source: Path) -> None:
        self._tok = tokenizer
        self.source = source
        added = tokenizer.get_added_tokens_decoder()
        self.all_special_ids = sorted(i for i, t in added.items() if t.special)
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=False)

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        return {"input_ids": self._tok.encode(text, add_special_tokens=add_special_tokens).ids}

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)


def load_tokenizer(path: str):
    p = Path(path)
    if p.is_file() and p.name.endswith(".json"):
        return _from_json(path, p)  # a bare tokenizer.json: only the tokenizers package reads it alone
    if not p.is_dir():
        raise UsageError(f"--tokenizer {path}: expected a local tokenizer folder (or the tokenizer.json in it)")
    try:
        from transformers import AutoTokenizer  # heavy and optional
    except ImportError:
        json_file = p / "tokenizer.json"
        if not json_file.is_file():
            raise UsageError(f"--tokenizer {path}: no tokenizer.json in the folder; its tokenizer needs the "
                             f"'transformers' package (pip install transformers sentencepiece), {_ELSE}") from None
        return _from_json(path, json_file)
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as e:  # a broken directory is bad input, not a crash
        raise UsageError(f"--tokenizer {path}: could not load a tokenizer ({type(e).__name__}: {e})") from None


def _from_json(path: str, json_file: Path) -> JsonTokenizer:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UsageError(f"--tokenizer {path}: needs the 'tokenizers' package (pip install tokenizers) "
                         f"or 'transformers' (pip install transformers), {_ELSE}") from None
    try:
        return JsonTokenizer(Tokenizer.from_file(str(json_file)), json_file)
    except Exception as e:  # not a tokenizer.json the library can read: bad input, one line
        raise UsageError(f"--tokenizer {path}: could not read {json_file.name} ({type(e).__name__}: {e})") from None
