"""How a shared model reads text: the preparation of its training data, its BPE, its dictionaries.

Each step runs in time linear in its input (docs/hub.md, 2b); each text file is parsed by one regular
expression a line that cannot backtrack, before subword-nmt or fairseq sees it (they end the program or
take quadratic time on some files).
"""

import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

from fairseq.data import Dictionary
from fairseq.data.encoders import register_tokenizer
from fairseq.data.encoders.moses_tokenizer import MosesTokenizer, MosesTokenizerConfig
from fairseq.data.encoders.subword_nmt_bpe import SubwordNMTBPE
from sacremoses import MosesPunctNormalizer
from subword_nmt import apply_bpe

from fairseq_dense.data.prepare import TEXT_RECORD
from fairseq_dense.hub.schema import MOSES_OPTIONS, PretrainedModelError

#: subword-nmt's time grows with the square of a word's length: longer words are split into pieces of this length.
MAX_BPE_WORD = 100
#: words whose BPE is kept (subword-nmt's cache grows with every distinct word: +102 MB for 100k words).
MAX_BPE_CACHE = 1 << 14
#: the versions subword-nmt knows (its ``learn_bpe`` writes 0.2); its own parse of a longer one is quadratic.
_BPE_VERSION_RE = re.compile(r"#version: 0\.[12]")
#: a merge as ``learn_bpe`` writes it: two symbols without whitespace, one space between.
_BPE_MERGE_RE = re.compile(r"\S+ \S+")
#: a dictionary line as fairseq writes it (and its ``#fairseq:overwrite`` flag): a count Python reads in linear time.
_DICTIONARY_LINE_RE = re.compile(r"(\S+) ([0-9]{1,18})( #fairseq:overwrite)?")
#: sacremoses' de/es/fr rule; ``re`` retries ``\.+`` at every dot of a run: quadratic (32k dots: 5.8 s).
DOTS_BEFORE_QUOTE = r'(\.+)"(\s*[^<])'
_DOT_RUN_RE = re.compile(r"\.+")
_QUOTE_TAIL_RE = re.compile(r'"(\s*[^<])')


@dataclass
class PreparedMosesConfig(MosesTokenizerConfig):
    """fairseq's Moses options plus the two steps of ``fairseq-dense-prepare`` around the tokenizer."""

    moses_normalize_punctuation: bool = field(default=False, metadata={"help": "Moses' punctuation normaliser first"})
    moses_lowercase: bool = field(default=False, metadata={"help": "lower-case after tokenising"})


@register_tokenizer("dense_moses", dataclass=PreparedMosesConfig)
class PreparedMosesTokenizer(MosesTokenizer):
    """fairseq's Moses tokenizer with the punctuation normaliser and lower-casing of ``fairseq-dense-prepare``."""

    def __init__(self, cfg: PreparedMosesConfig):
        super().__init__(cfg)
        self.normalizer = MosesPunctNormalizer(lang=cfg.source_lang) if cfg.moses_normalize_punctuation else None

    def normalize(self, text: str) -> str:
        """``MosesPunctNormalizer.normalize`` (default options), its de/es/fr dots rule in linear time."""
        for pattern, substitution in self.normalizer.substitutions:
            text = dots_before_quote(text) if pattern == DOTS_BEFORE_QUOTE else re.sub(pattern, substitution, text)
        return text.strip()

    def encode(self, x: str) -> str:
        text = super().encode(self.normalize(x) if self.normalizer else x)
        return text.lower() if self.cfg.moses_lowercase else text


def dots_before_quote(text: str) -> str:
    """``re.sub(DOTS_BEFORE_QUOTE, r'"\\1\\2', text)`` in linear time.

    From any dot of a run, ``\\.+`` can only match up to the run's end, so the rule matches at the
    run's first dot or at none of its dots: each run is tried once, where ``re`` tries each of its dots.
    """
    out, done, start = [], 0, text.find(".")
    while start >= 0:
        end = _DOT_RUN_RE.match(text, start).end()
        tail = _QUOTE_TAIL_RE.match(text, end)
        if tail:
            out += [text[done:start], '"', text[start:end], tail.group(1)]
            done = end = tail.end()  # as re.sub, go on after the match
        start = text.find(".", end)
    return "".join(out) + text[done:]


def read_record(data_dir: Path) -> Dict[str, Any]:
    """The text-preparation record of a data directory (``{}`` when there is none)."""
    path = Path(data_dir) / TEXT_RECORD
    if not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise PretrainedModelError(f"{path}: not readable as JSON ({type(err).__name__})") from None
    allowed = {"source_lang": str, "target_lang": str, **{key: bool for key in MOSES_OPTIONS}}
    if not isinstance(record, dict) or any(k not in allowed or type(v) is not allowed[k] for k, v in record.items()):
        raise PretrainedModelError(f"{path}: not a record of fairseq-dense-prepare ({', '.join(allowed)})")
    return record


class VerifiedSubwordNMTBPE(SubwordNMTBPE):
    """fairseq's ``subword_nmt`` BPE (same output) from checked codes text, in time linear in the input: a word
    longer than :data:`MAX_BPE_WORD` characters is segmented in pieces joined by the separator."""

    def __init__(self, codes: str, separator: str):  # not fairseq's: it reads a path through an argument parser
        self.bpe = apply_bpe.BPE(io.StringIO(codes), -1, separator, None, None)
        self.bpe_symbol = separator + " "

    def encode(self, x: str) -> str:
        out = []
        for word in x.strip("\r\n ").split(" "):
            for start in range(0, len(word), MAX_BPE_WORD):
                if len(self.bpe.cache) >= MAX_BPE_CACHE:  # each piece adds one entry
                    self.bpe.cache.clear()
                out += self.bpe.segment_tokens([word[start : start + MAX_BPE_WORD]])
                if start + MAX_BPE_WORD < len(word):
                    out[-1] += self.bpe.separator
        return " ".join(out)


def parse_bpe_codes(where: str, data: bytes) -> str:
    """The codes text: an optional ``#version: 0.1`` or ``0.2`` line, then ``left right`` merges (at least one);
    subword-nmt itself ends the program (``sys.exit``) on a malformed line or on codes without any merge."""
    text = utf8_text(where, data)
    lines = text.rstrip("\n").split("\n")
    start = 1 if lines[0].startswith("#version:") else 0
    if start and not _BPE_VERSION_RE.fullmatch(lines[0]):
        raise PretrainedModelError(f"{where}: line 1 is not '#version: 0.2' (or 0.1, the versions subword-nmt knows)")
    if len(lines) == start or lines == [""]:
        raise PretrainedModelError(f"{where}: holds no BPE merge (a '<left> <right>' line)")
    for number, line in enumerate(lines[start:], start + 1):
        if not _BPE_MERGE_RE.fullmatch(line):
            raise PretrainedModelError(
                f"{where}: line {number} is not a BPE merge ('<left> <right>': two symbols, one space)"
            )
    return text


def utf8_text(where: str, data: bytes) -> str:
    """UTF-8 text with universal newlines (as fairseq and subword-nmt open their files)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise PretrainedModelError(f"{where}: not UTF-8 text (line {line})") from None
    return io.StringIO(text, newline=None).read()


def parse_dictionary(where: str, data: bytes, size: Optional[int] = None, side: str = ""):
    """A fairseq ``Dictionary`` of ``size`` symbols from the bytes of ``dict.<lang>.txt``: lines ``<symbol>
    <count>`` as fairseq writes them (optionally its ``#fairseq:overwrite`` flag), no symbol repeating another
    or a special symbol (with the flag, fairseq would keep both). Messages name the line, never quote it."""
    dictionary = Dictionary()
    seen = dict.fromkeys(dictionary.symbols, 0)
    lines = utf8_text(where, data).split("\n")
    for number, line in enumerate(lines[:-1] if lines[-1] == "" else lines, 1):
        match = _DICTIONARY_LINE_RE.fullmatch(line)
        if not match:
            raise PretrainedModelError(
                f"{where}: line {number} is not '<symbol> <count>' (no whitespace in the symbol, a count of at "
                "most 18 digits)"
            )
        symbol, count = match.group(1, 2)
        if symbol in seen:
            earlier = f"the symbol of line {seen[symbol]}" if seen[symbol] else "a special symbol (<s>, <pad>, ...)"
            raise PretrainedModelError(f"{where}: line {number} repeats {earlier}")
        seen[symbol] = number
        dictionary.add_symbol(symbol, n=int(count))
    if size is not None and len(dictionary) != size:
        raise PretrainedModelError(
            f"{where}: {len(dictionary)} symbols, but config.json and model.safetensors expect {size} "
            f"for the {side} side (the file does not belong to this model)"
        )
    return dictionary
