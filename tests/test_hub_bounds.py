"""What a shared model's text files and a user's text cost: linear parsers, linear tokenizing, no import from the
current directory, torch's random generator left alone, a bounded word cache.

The shared tiny export is described in ``tests/hub_hostile_helpers.py``.
"""

import os
import random
import re
import subprocess
import sys
import time

import pytest
import torch

from fairseq_dense import hub
from fairseq_dense.hub import PretrainedModelError
from fairseq_dense.hub.text import (
    DOTS_BEFORE_QUOTE,
    MAX_BPE_CACHE,
    MAX_BPE_WORD,
    PreparedMosesConfig,
    PreparedMosesTokenizer,
    VerifiedSubwordNMTBPE,
    dots_before_quote,
    parse_bpe_codes,
    parse_dictionary,
)
from tests import helpers
from tests.hub_hostile_helpers import tamper

# ---------------------------------------------------------------- text files: export's rules, linear time

HOSTILE_TEXT = {
    "a long version line (subword-nmt's own parse is quadratic)": (
        parse_bpe_codes,
        b"#version: 1" + b".0" * 500_000 + b".1\na b\n",
        "line 1 is not '#version: 0.2'",
    ),
    "a merge of a 1 MB run of spaces": (parse_bpe_codes, b"a" + b" " * 1_000_000 + b"b\n", "line 1 is not a BPE merge"),
    "a count of 4,301 digits (Python's int() refuses it)": (
        parse_dictionary,
        b"a 1\nb " + b"9" * 4301 + b"\n",
        "line 2 is not '<symbol> <count>'",
    ),
    "a count of 1 MB of digits": (parse_dictionary, b"a " + b"9" * 1_000_000 + b"\n", "line 1 is not"),
    "a symbol with a space": (parse_dictionary, b"a b 1\n", "line 1 is not"),
    "a symbol with a tab": (parse_dictionary, b"a 1\na\tb 1\n", "line 2 is not"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TEXT))
def test_text_files_are_refused_in_linear_time_naming_the_line(case):
    parse, data, match = HOSTILE_TEXT[case]
    start = time.perf_counter()
    with pytest.raises(PretrainedModelError) as info:
        parse("dir/file", data)
    assert time.perf_counter() - start < 1.0
    message = str(info.value)
    assert message.startswith("dir/file: ") and match in message and "\n" not in message and "999" not in message


def test_the_files_export_writes_still_parse():
    assert parse_bpe_codes("bpecodes", b"#version: 0.2\na b\nab c</w>\n").startswith("#version: 0.2")
    assert parse_bpe_codes("bpecodes", b"a b\r\nc d\r\n") == "a b\nc d\n"  # version 0.1 and Windows newlines
    dictionary = parse_dictionary("dict", b"a 12\nb 0\nc 1 #fairseq:overwrite\n" + b"d " + b"9" * 18 + b"\n")
    assert len(dictionary) == 8 and dictionary.count[-1] == 10**18 - 1


# ---------------------------------------------------------------- user text: linear in its length

#: runs of each punctuation class (single characters and the class cycled), the rules' adversarial inputs
RUNS = [*".…,\"'-", "()[]{}<>", "!?¿¡;:", "„“”«»‘’‚`´", "–—", "&|@#$%*+/\\=^_~", "\u00a0 ", '.".', ". "]


def _cpu_time(encode, text: str, repeats: int) -> float:
    """The least CPU time of ``repeats`` runs (the CPU time of this process: other jobs on the machine do not count)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        encode(text)
        times.append(time.process_time() - start)
    return min(times)


@pytest.mark.parametrize("lang", ["de", "en"])
def test_tokenizing_is_linear_in_runs_of_punctuation(lang):
    """2k -> 32k characters (16x): each run's time grows less than 3 x 16 (measured: 11-26x; quadratic: 256x)."""
    tokenizer = PreparedMosesTokenizer(
        PreparedMosesConfig(source_lang=lang, moses_normalize_punctuation=True, moses_lowercase=True)
    )
    growth = {}
    for unit in RUNS:
        short, long = ((unit * n)[:n] for n in (2000, 32000))
        growth[unit] = round(_cpu_time(tokenizer.encode, long, 1) / _cpu_time(tokenizer.encode, short, 5), 1)
    assert max(growth.values()) < 3 * 16, growth


def test_the_linear_dots_rule_is_sacremoses_rule():
    random.seed(0)
    for _ in range(20_000):
        text = "".join(random.choice('.."  \t<a\u00a0') for _ in range(random.randint(0, 12)))
        assert dots_before_quote(text) == re.sub(DOTS_BEFORE_QUOTE, r'"\1\2', text), repr(text)
    tokenizer = PreparedMosesTokenizer(PreparedMosesConfig(source_lang="de", moses_normalize_punctuation=True))
    from sacremoses import MosesPunctNormalizer

    text = '„Ja…", sagte er... "Nein." Er ging."  <b>'
    assert tokenizer.normalize(text) == MosesPunctNormalizer(lang="de").normalize(text)


def test_a_long_input_is_refused_by_its_length_before_the_tokenizer(gru, monkeypatch):
    model = hub.from_pretrained(gru.dir)
    limit = model.max_positions[0] * MAX_BPE_WORD
    monkeypatch.setattr(type(model.tokenizer), "encode", lambda *a: pytest.fail("the tokenizer saw it"))
    with pytest.raises(ValueError, match=rf"input of {limit + 1} characters: .* at most {limit} characters"):
        model.translate("." * (limit + 1))


def test_the_bpe_word_cache_is_bounded():
    bpe = VerifiedSubwordNMTBPE("#version: 0.2\na b</w>\n", "@@")
    bpe.encode(" ".join(f"w{i}" for i in range(MAX_BPE_CACHE + 100)))
    assert 0 < len(bpe.bpe.cache) <= MAX_BPE_CACHE
    assert bpe.encode("ab cab abc") == "ab c@@ ab a@@ b@@ c"


# ---------------------------------------------------------------- what a load changes


def test_no_module_of_the_current_directory_is_imported(gru, tmp_path, marker):
    """A model folder holding safetensors.py, sacremoses.py, ... loads and translates from ``python -c`` in it,
    and a hub repository id (offline: refused) imports no huggingface_hub.py from it either."""
    model_dir = tamper(gru.dir, tmp_path, lambda d, m: None, marker, resign=False)
    for name in ("safetensors", "sacremoses", "subword_nmt", "regex", "xml", "huggingface_hub"):
        (model_dir / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write('{name} ')\n")
    code = (
        "import fairseq_dense; print(fairseq_dense.from_pretrained('.').translate('a b c', beam=2, max_len_b=4))\n"
        "try: fairseq_dense.from_pretrained('someone/model', local_files_only=True)\n"
        "except fairseq_dense.hub.PretrainedModelError as err: print(err)"
    )
    env = dict(os.environ, PYTHONPATH=str(helpers.REPO))
    run = subprocess.run([sys.executable, "-c", code], cwd=model_dir, capture_output=True, text=True, env=env)
    assert run.returncode == 0 and run.stdout.strip(), run.stderr[-2000:]
    assert not marker.exists(), marker.read_text()


def test_load_and_translate_leave_the_random_generator_alone(gru):
    torch.manual_seed(1)
    state = torch.get_rng_state()
    model = hub.from_pretrained(gru.dir)
    model.translate("a b c", beam=2, max_len_b=4)
    assert torch.equal(state, torch.get_rng_state())
    model.translate("a b c", beam=1, sampling=True, max_len_b=4)  # sampling draws, as in fairseq
    assert not torch.equal(state, torch.get_rng_state())


def test_a_folder_named_snapshots_without_blobs_loads(gru, tmp_path, marker):
    model_dir = tamper(gru.dir, tmp_path / "snapshots", lambda d, m: None, marker, resign=False)
    assert model_dir.parent.name == "snapshots"
    assert isinstance(hub.from_pretrained(model_dir).translate("a b", beam=2, max_len_b=3), str)
