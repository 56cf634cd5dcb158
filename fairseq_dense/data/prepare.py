"""Raw parallel text -> Moses tokenisation -> joint BPE -> ``fairseq-preprocess``.

The one data pipeline of the project (the quick-start, the examples and the benchmarks call it). Input: a
folder of ``{train,valid,test}.{src,tgt}`` raw UTF-8 text, one sentence per line. Output (``--dest``)::

    tok/        Moses-tokenised (optionally lower-cased) text
    bpe/        the same after joint BPE
    bpecodes    the joint BPE codes (subword-nmt)
    bin/        fairseq binarised data (joined dictionary) and ``text_preparation.json``:
                the text steps above as the options of fairseq-dense's ``dense_moses``
                tokenizer, which ``fairseq-dense-export`` records and
                ``fairseq-dense-interactive`` applies
    prepare.json  the options used (languages, merges, lower-casing) and a content
                  fingerprint of the raw files (size and SHA-256 of each)

Everything is written into ``DEST.tmp`` first and renamed at the end (:func:`building`). A finished ``DEST``
is reused only when both the options and the raw files' fingerprint match (unless ``force``); otherwise it is
rebuilt and the log says what changed.
"""

import argparse
import contextlib
import hashlib
import itertools
import json
import logging
import os
import shutil
import time
from multiprocessing import Pool
from typing import Dict, Iterator, List, Optional, Sequence

from fairseq_dense.checkpoints import replacing
from fairseq_dense.logging_setup import add_verbose_flag, configure_logging
from fairseq_dense.validation import find_non_utf8

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")
#: The record of the text steps, beside the dictionaries (read by fairseq_dense.hub.text.read_record).
TEXT_RECORD = "text_preparation.json"
# sacremoses wants ISO 639-1 codes; corpora often use 639-3 names
MOSES_LANG = {"deu": "de", "eng": "en", "fra": "fr", "tur": "tr", "spa": "es", "ita": "it"}


class DataError(ValueError):
    """Malformed input data; the message names the file (and line) at fault."""


def positive(cast):
    """An argparse ``type``: a number of type ``cast`` above zero (the command's options that count things)."""

    def parse(text: str):
        value = cast(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
        return value

    return parse


def moses_lang(lang: str) -> str:
    return MOSES_LANG.get(lang, lang if len(lang) == 2 else "en")


def write_json(path: str, obj, indent: int = 2) -> None:
    """Write ``obj`` as JSON, never a half-written file (:func:`~fairseq_dense.checkpoints.replacing`)."""
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=indent)


@contextlib.contextmanager
def building(dest: str, mark: Optional[str] = None) -> Iterator[str]:
    """A fresh folder ``DEST.tmp`` to fill, renamed over ``dest`` when the block succeeds and removed when it fails
    (the folder form of :func:`~fairseq_dense.checkpoints.replacing`). ``mark``: the file that a ``dest`` built
    here holds; a file or a non-empty folder without it (``--dest .``, the raw folder's parent): :class:`DataError`."""
    if mark and os.path.exists(dest) and not os.path.isfile(os.path.join(dest, mark)):
        if not os.path.isdir(dest) or os.listdir(dest):  # an empty folder is there to be filled
            raise DataError(f"{dest}: not a folder fairseq-dense-prepare wrote (no {mark}): name another, or empty it")
    tmp = dest.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(tmp, dest)


def read_lines(path: str) -> List[str]:
    """A raw text file's lines, ended by LF, CRLF or CR (as fairseq reads text), not where ``str.splitlines``
    would split a sentence (U+2028, NEL, a form feed, ...: the pairs would shift), without a leading byte-order
    mark; fails clearly on missing files or non-UTF-8 bytes."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    try:
        with open(path, encoding="utf-8-sig") as f:
            return [line.rstrip("\n") for line in f]
    except UnicodeDecodeError:
        raise DataError(find_non_utf8(path)) from None


def check_parallel(raw_dir: str, src: str, tgt: str) -> None:
    """Every split exists on both sides, decodes as UTF-8, and has equal line counts."""
    for split in SPLITS:
        a = read_lines(os.path.join(raw_dir, f"{split}.{src}"))
        b = read_lines(os.path.join(raw_dir, f"{split}.{tgt}"))
        if len(a) != len(b):
            raise DataError(f"{raw_dir}/{split}.{src} has {len(a)} lines but {raw_dir}/{split}.{tgt} has {len(b)}")
        if not a:
            raise DataError(f"{raw_dir}/{split}.{src}: empty file")


def fingerprint(raw_dir: str, src: str, tgt: str) -> Dict[str, Dict]:
    """``{"train.src": {"bytes": n, "sha256": hex}, ...}`` for every raw file the pipeline reads."""
    out = {}
    for split in SPLITS:
        for lang in (src, tgt):
            path = os.path.join(raw_dir, f"{split}.{lang}")
            if not os.path.isfile(path):
                raise DataError(f"{path}: file not found")
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
            out[f"{split}.{lang}"] = {"bytes": os.path.getsize(path), "sha256": digest.hexdigest()}
    return out


def describe_changes(old: Dict, new: Dict) -> List[str]:
    """What differs between two ``prepare.json`` contents, one phrase per option or raw file."""
    changes = [
        f"{key} {old.get(key)!r} -> {new.get(key)!r}"
        for key in sorted(set(old) | set(new))
        if key != "inputs" and old.get(key) != new.get(key)
    ]
    before, after = old.get("inputs") or {}, new.get("inputs") or {}
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a is None or b is None:
            changes.append(f"{name} {'added' if a is None else 'no longer read'}")
        elif a != b:
            sizes = "same size, other content" if a["bytes"] == b["bytes"] else f"{a['bytes']} -> {b['bytes']} bytes"
            changes.append(f"{name} changed ({sizes})")
    return changes


#: recorded in ``prepare.json`` for the reader, not compared: the raw files are identified by their
#: content, so a moved work folder (or raw folder) reuses its data and the models trained on it
NOT_COMPARED = ("raw_dir",)


def _reusable(dest: str, meta: Dict) -> Optional[List[str]]:
    """None if ``dest`` holds this very preparation, else the reasons to (re)build it."""
    meta_path = os.path.join(dest, "prepare.json")
    if not os.path.isfile(meta_path):
        return []
    with open(meta_path) as f:
        old = {k: v for k, v in json.load(f).items() if k not in NOT_COMPARED}
    new = {k: v for k, v in meta.items() if k not in NOT_COMPARED}
    if "inputs" not in old:  # an earlier version's preparation: nothing tells whether the raw files changed
        return ["no fingerprint of the raw files in its prepare.json (an earlier version prepared it)"]
    return describe_changes(old, new) or None


def text_steps(src: str, tgt: str, lowercase: bool) -> Dict:
    """The text steps of the preparation: the options of fairseq-dense's ``dense_moses`` tokenizer (sacremoses'
    punctuation normaliser, tokeniser without escaping or aggressive dash splits, optional lower-casing)."""
    return {
        "source_lang": moses_lang(src),
        "target_lang": moses_lang(tgt),
        "moses_normalize_punctuation": True,
        "moses_no_escape": True,
        "moses_no_dash_splits": True,
        "moses_lowercase": lowercase,
    }


def write_text_record(bin_dir: str, src: str, tgt: str, lowercase: bool) -> None:
    """Record the :func:`text_steps` in ``bin_dir``, beside the dictionaries (read by the export and the hub)."""
    write_json(os.path.join(bin_dir, TEXT_RECORD), text_steps(src, tgt, lowercase))


_TOKENIZER = None


def _init_tokenizer(lang: str, lowercase: bool) -> None:
    """Tokenise ``lang`` text with the ``dense_moses`` tokenizer of the :func:`text_steps`: the training data is
    prepared by the tokenizer a shared model applies (its normaliser is linear in a line's length)."""
    global _TOKENIZER
    from fairseq_dense.hub.text import PreparedMosesConfig, PreparedMosesTokenizer

    _TOKENIZER = PreparedMosesTokenizer(PreparedMosesConfig(**text_steps(lang, lang, lowercase)))


def _tokenize(line: str) -> str:
    return _TOKENIZER.encode(line)


def tokenize_file(src_path: str, dst_path: str, lang: str, lowercase: bool, workers: int) -> None:
    lines = read_lines(src_path)
    if workers > 1 and len(lines) > 5000:
        with Pool(workers, initializer=_init_tokenizer, initargs=(moses_lang(lang), lowercase)) as pool:
            out = pool.map(_tokenize, lines, chunksize=2000)
    else:
        _init_tokenizer(moses_lang(lang), lowercase)
        out = [_tokenize(line) for line in lines]
    with open(dst_path, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in out)


def learn_joint_bpe(paths: Sequence[str], codes_path: str, merges: int) -> None:
    """Learn one BPE model on the concatenation of both training sides."""
    from subword_nmt.learn_bpe import learn_bpe

    with open(codes_path, "w", encoding="utf-8") as out, contextlib.ExitStack() as files:
        lines = itertools.chain.from_iterable(files.enter_context(open(p, encoding="utf-8")) for p in paths)
        try:
            learn_bpe(lines, out, merges, min_frequency=2, total_symbols=False)
        except ValueError:
            # subword-nmt fails on a corpus with no symbol pair at all (single-character
            # words); an empty list of merges is the right model for it
            logger.warning("no BPE merge possible on %s; words stay whole", ", ".join(paths))
            out.seek(0)
            out.truncate()
            out.write("#version: 0.2\n")


def apply_bpe_file(codes_path: str, src_path: str, dst_path: str) -> None:
    from subword_nmt.apply_bpe import BPE

    with open(codes_path, encoding="utf-8") as codes:
        if not any(line.strip() and not line.startswith("#version") for line in codes):
            shutil.copyfile(src_path, dst_path)  # no merges: BPE is the identity
            return
        codes.seek(0)
        bpe = BPE(codes)
    with open(src_path, encoding="utf-8") as f, open(dst_path, "w", encoding="utf-8") as out:
        for line in f:
            out.write(bpe.process_line(line))


def binarize(bpe_dir: str, bin_dir: str, src: str, tgt: str, workers: int) -> None:
    from fairseq import options
    from fairseq_cli import preprocess

    prefixes = [a for split in SPLITS for a in (f"--{split}pref", os.path.join(bpe_dir, split))]
    argv = ["--source-lang", src, "--target-lang", tgt, *prefixes, "--destdir", bin_dir, "--joined-dictionary"]
    preprocess.main(options.get_preprocessing_parser().parse_args([*argv, "--workers", str(workers)]))


def prepare(
    raw_dir: str,
    dest: str,
    src: str,
    tgt: str,
    merges: int = 10000,
    lowercase: bool = False,
    workers: int = 2,
    force: bool = False,
) -> str:
    """Run the whole pipeline (or reuse ``dest``, as the module says); returns ``dest``."""
    if src == tgt:
        raise DataError(f"source and target language are both {src!r} (--src/--tgt): a pair needs two suffixes")
    meta = {
        "src": src,
        "tgt": tgt,
        "merges": merges,
        "lowercase": lowercase,
        "raw_dir": os.path.abspath(raw_dir),
        "moses_src": moses_lang(src),
        "moses_tgt": moses_lang(tgt),
        "inputs": fingerprint(raw_dir, src, tgt),
    }
    if force:
        if os.path.isdir(dest):
            logger.info("rebuilding %s (--force)", dest)
    else:
        changes = _reusable(dest, meta)
        if changes is None:
            logger.info("reusing prepared data in %s (same options, same raw files)", dest)
            if not os.path.isfile(os.path.join(dest, "bin", TEXT_RECORD)):  # prepared before the record existed
                write_text_record(os.path.join(dest, "bin"), src, tgt, lowercase)
            return dest
        if changes:
            logger.warning("rebuilding %s: %s", dest, "; ".join(changes))
    check_parallel(raw_dir, src, tgt)
    files = [(f"{split}.{lang}", lang) for split in SPLITS for lang in (src, tgt)]
    start = time.time()
    with building(dest, "prepare.json") as tmp:
        os.makedirs(os.path.join(tmp, "tok"))
        os.makedirs(os.path.join(tmp, "bpe"))
        for name, lang in files:
            tokenize_file(os.path.join(raw_dir, name), os.path.join(tmp, "tok", name), lang, lowercase, workers)
        logger.info("tokenised in %.0fs", time.time() - start)
        codes = os.path.join(tmp, "bpecodes")
        learn_joint_bpe([os.path.join(tmp, "tok", f"train.{lang}") for lang in (src, tgt)], codes, merges)
        logger.info("learned %d BPE merges in %.0fs", merges, time.time() - start)
        for name, _ in files:
            apply_bpe_file(codes, os.path.join(tmp, "tok", name), os.path.join(tmp, "bpe", name))
        binarize(os.path.join(tmp, "bpe"), os.path.join(tmp, "bin"), src, tgt, workers)
        write_text_record(os.path.join(tmp, "bin"), src, tgt, lowercase)
        write_json(os.path.join(tmp, "prepare.json"), meta)
    logger.info("prepared %s in %.0fs", dest, time.time() - start)
    return dest


#: ``--corpus`` names: corpora that ship with the package (fairseq_dense.data.tatoeba.NAME)
BUNDLED_CORPORA = ("tatoeba-deu-eng",)


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairseq-dense-prepare",
        description="Raw parallel text -> sacremoses tokenisation -> joint subword-nmt BPE -> fairseq-preprocess",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    add = parser.add_argument
    # fmt: off
    source.add_argument("--raw", help="folder with {train,valid,test}.{SRC,TGT} raw text")
    source.add_argument("--corpus", choices=BUNDLED_CORPORA, help="a corpus bundled with the package "
                        "(Tatoeba de-en, CC-BY 2.0 FR), decompressed into DEST-raw/ first")
    add("--dest", required=True, help="output folder (tok/, bpe/, bpecodes, bin/)")
    add("--src", help="source language suffix, e.g. deu (default with --corpus: de)")
    add("--tgt", help="target language suffix, e.g. eng (default with --corpus: en)")
    add("--bpe-merges", type=positive(int), help="number of joint BPE merges (default 10000; 4000 with --corpus)")
    add("--max-lines", type=positive(int), help="with --corpus: keep the first N pairs of each split (a quick try)")
    add("--lowercase", action="store_true", help="lower-case after tokenisation")
    add("--workers", type=positive(int), default=2, help="processes for tokenisation and binarisation")
    add("--force", action="store_true",
        help="redo even if DEST holds the same preparation (same options and raw file contents)")
    # fmt: on
    add_verbose_flag(parser)
    return parser


def main(argv=None) -> int:
    """``fairseq-dense-prepare``; returns 0 (bad input exits 1 or 2 with one line naming the cause)."""
    parser = get_parser()
    args = parser.parse_args(argv)
    configure_logging("%(asctime)s | %(message)s", datefmt="%H:%M:%S", verbose=args.verbose)
    merges = args.bpe_merges or (4000 if args.corpus else 10000)
    if args.max_lines and not args.corpus:
        parser.error("--max-lines takes a number of pairs with --corpus only")
    if args.raw and not (args.src and args.tgt):
        parser.error("--raw needs --src and --tgt (the file suffixes)")
    src, tgt = args.src or "de", args.tgt or "en"
    if args.corpus and {src, tgt} != {"de", "en"}:
        parser.error(f"--corpus {args.corpus} is de-en: --src/--tgt must be de and en")
    try:
        raw = args.raw
        if args.corpus:  # decompressed beside DEST
            from fairseq_dense.data import tatoeba

            raw = tatoeba.extract(os.path.normpath(args.dest) + "-raw", args.max_lines)
        prepare(raw, args.dest, src, tgt, merges, args.lowercase, args.workers, args.force)
    except DataError as e:
        raise SystemExit(f"error: {e}")
    logger.info("binarised data for fairseq-train: %s", os.path.join(args.dest, "bin"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
