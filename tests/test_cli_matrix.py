"""fairseq's everyday tools and options on one tiny checkpoint per family (the contract matrix).

One tiny checkpoint per family, trained once per test run (in a test process, fairseq's
own ``fairseq_cli.train``; it is the float32 run of ``tests/test_bf16_autocast.py`` too), is
decoded by ``fairseq_cli.generate.main`` (what the ``fairseq-generate`` command runs, without
paying fairseq's import per case) with each option a fairseq user reaches for, scored by ``fairseq_cli.validate``
and ``fairseq_cli.interactive`` the same way, and loaded through fairseq's hub
interface. Every cell either passes or is one of fairseq's own gaps, pinned down in
``tests/test_fairseq_gaps.py``. The other cells of the matrix live beside their
features: ``tests/test_arch_registry.py`` (the ``Namespace`` build path),
``tests/test_average.py``, ``tests/test_resume.py``, ``tests/test_simplex.py`` and
``tests/test_embedding_sharing.py``.
"""

import json
import logging
import re
from typing import Dict, List

import pytest

from tests import reliability_helpers as rh

pytestmark = pytest.mark.slow

ARCHS = rh.tiny_archs()
N_TRAIN, UPDATES = 64, 20  # 8 updates per epoch
#: the options of each family's float32 run, shared with tests/test_bf16_autocast.py (one training for both files)
OPTIONS = ["--optimizer", "adam", "--lr", "0.003", "--batch-size", "8", "--save-interval", str(UPDATES)]


@pytest.fixture(scope="module")
def data_bin(shared):
    return shared.corpus(N_TRAIN)


@pytest.fixture(scope="module")
def checkpoints(data_bin, shared):
    """``checkpoint(arch)``: its ``checkpoint_last.pt`` after ``UPDATES`` updates, trained on first use."""

    def checkpoint(arch: str):
        return shared.train(data_bin, arch, UPDATES, *OPTIONS)[0] / "checkpoint_last.pt"

    return checkpoint


class Generated:
    """The parsed output of one ``fairseq-generate`` or ``fairseq-interactive`` run: per sentence id,
    its S/T/H/D/P/A/C lines."""

    def __init__(self, text: str):
        self.text = text
        self.lines: Dict[str, Dict[int, List[List[str]]]] = {}
        for line in text.splitlines():
            m = re.match(r"^([STHDPAC])-(\d+)\t(.*)$", line)
            if m:
                self.lines.setdefault(m.group(1), {}).setdefault(int(m.group(2)), []).append(m.group(3).split("\t"))

    def hyps(self, with_scores: bool = False) -> Dict[int, List[str]]:
        """Hypothesis texts (or ``score<TAB>text``) of every sentence, best first."""
        return {i: ["\t".join(h) if with_scores else h[-1] for h in hs] for i, hs in self.lines.get("H", {}).items()}

    def get(self, kind: str) -> Dict[int, List[List[str]]]:
        return self.lines.get(kind, {})

    def sources(self) -> Dict[int, str]:
        return {i: s[-1] for i, (s,) in self.get("S").items()}


def generate(data_bin, ckpt, tmp_path, *flags) -> Generated:
    """``fairseq-generate DATA --path CKPT --gen-subset test --cpu FLAGS`` in this process."""
    from fairseq import options
    from fairseq_cli import generate as fairseq_generate

    out = tmp_path / f"gen{len(list(tmp_path.glob('gen*')))}"
    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(parser, [
        str(data_bin), "--path", str(ckpt), "--gen-subset", "test", "--cpu", "--results-path", str(out),
        "--required-batch-size-multiple", "1", "--num-workers", "0", *flags,
    ])  # fmt: skip
    fairseq_generate.main(args)
    result = Generated((out / "generate-test.txt").read_text())
    assert result.hyps(), result.text[-2000:]
    return result


@pytest.fixture(scope="module")
def baseline():
    """Beam 5, batch 64, with alignments, per arch (shared by the cases that compare against it)."""
    return {}


def _baseline(arch, data_bin, checkpoints, tmp_path, cache) -> Generated:
    if arch not in cache:
        cache[arch] = generate(
            data_bin, checkpoints(arch), tmp_path, "--beam", "5", "--batch-size", "64", "--print-alignment"
        )
    return cache[arch]


@pytest.mark.parametrize("arch", ARCHS)
def test_batch_size_alignment_and_ensemble(arch, data_bin, checkpoints, tmp_path, baseline):
    ckpt = checkpoints(arch)
    base = _baseline(arch, data_bin, checkpoints, tmp_path, baseline)
    n = len(base.get("S"))
    assert n == 8 and len(base.hyps()) == n
    # --print-alignment: one alignment per hypothesis, one source position per target word
    for i, (hyp,) in base.get("H").items():
        (align,) = base.get("A")[i]
        assert len(align[0].split()) == len(hyp[-1].split()), (i, align, hyp)
    # beam 5 with batch size 1 gives the same hypotheses as with batch size 64
    assert generate(data_bin, ckpt, tmp_path, "--beam", "5", "--batch-size", "1").hyps() == base.hyps()
    # an ensemble of the checkpoint with itself is the checkpoint
    ensemble = generate(data_bin, f"{ckpt}:{ckpt}", tmp_path, "--beam", "5", "--batch-size", "64")
    assert ensemble.hyps() == base.hyps()


@pytest.mark.parametrize("arch", ARCHS)
def test_retain_dropout_changes_the_output(arch, data_bin, checkpoints, tmp_path, baseline):
    base = _baseline(arch, data_bin, checkpoints, tmp_path, baseline)
    dropout = generate(data_bin, checkpoints(arch), tmp_path, "--beam", "5", "--batch-size", "64", "--retain-dropout")
    assert len(dropout.hyps()) == len(base.hyps())
    assert dropout.hyps(with_scores=True) != base.hyps(with_scores=True), "--retain-dropout changed nothing"


@pytest.mark.parametrize("arch", ARCHS)
def test_search_options(arch, data_bin, checkpoints, tmp_path):
    ckpt = checkpoints(arch)
    # sampling with a seed: the same output twice
    sampling = ["--sampling", "--sampling-topk", "5", "--beam", "5", "--nbest", "5", "--seed", "1"]
    first = generate(data_bin, ckpt, tmp_path, *sampling)
    assert all(len(h) == 5 for h in first.hyps().values())
    assert generate(data_bin, ckpt, tmp_path, *sampling).hyps(with_scores=True) == first.hyps(with_scores=True)
    # the two diversity options, each alone (together fairseq refuses them)
    for flags in (["--diverse-beam-groups", "2", "--beam", "4"], ["--diversity-rate", "0.5", "--beam", "4"]):
        assert len(generate(data_bin, ckpt, tmp_path, *flags).hyps()) == 8, flags
    # --prefix-size 1: every hypothesis starts with the reference's first token
    prefixed = generate(data_bin, ckpt, tmp_path, "--beam", "5", "--prefix-size", "1")
    for i, (ref,) in prefixed.get("T").items():
        assert prefixed.hyps()[i][0].split()[0] == ref[-1].split()[0], (i, prefixed.hyps()[i], ref)
    # n-best, penalties and length limits
    limited = generate(
        data_bin,
        ckpt,
        tmp_path,
        "--beam",
        "5",
        "--nbest",
        "3",
        "--unkpen",
        "1",
        "--lenpen",
        "0.5",
        "--max-len-a",
        "1.2",
        "--max-len-b",
        "10",
    )
    # fairseq's limit: at most int(a * src_len + b) words before EOS, src_len the batch's longest source with EOS
    longest = max(len(src[-1].split()) + 1 for (src,) in limited.get("S").values())
    for i, hyps in limited.hyps().items():
        assert len(hyps) == 3, i
        assert all(len(h.split()) <= int(1.2 * longest + 10) for h in hyps), (i, hyps)
    # --match-source-len: source length + 1 words for every hypothesis, as with fairseq's built-ins
    # (fairseq's gap, see tests/test_fairseq_gaps.py)
    matched = generate(data_bin, ckpt, tmp_path, "--beam", "5", "--match-source-len")
    for i, src in matched.sources().items():
        assert [len(h.split()) for h in matched.hyps()[i]] == [len(src.split()) + 1], (i, src, matched.hyps()[i])


def validate(data_bin, ckpt, *flags) -> Dict[str, float]:
    """``fairseq-validate DATA --path CKPT --cpu FLAGS`` in this process; the stats it prints per subset."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import validate as fairseq_validate

    argv = [str(data_bin), "--path", str(ckpt), "--cpu", "--num-workers", "0", "--log-format", "json", *flags]
    args = options.parse_args_and_arch(options.get_validation_parser(), argv)
    overrides = options.parse_args_and_arch(options.get_validation_parser(), argv, suppress_defaults=True)
    stats: Dict[str, float] = {}

    class Stats(logging.Handler):
        def emit(self, record):
            stats.update(json.loads(record.getMessage()))

    root, bar = logging.getLogger(), logging.getLogger("fairseq.logging.progress_bar")
    handlers, level, handler = list(root.handlers), root.level, Stats()
    bar.addHandler(handler)
    try:
        fairseq_validate.main(convert_namespace_to_omegaconf(args), override_args=overrides)
    finally:  # validate.main replaces the root logger's handlers
        bar.removeHandler(handler)
        root.handlers[:] = handlers
        root.setLevel(level)
    return {k: float(v) for k, v in stats.items() if k.endswith("loss")}


@pytest.mark.parametrize("arch", ARCHS)
def test_validate_and_score_reference_agree_with_training(arch, data_bin, checkpoints, tmp_path):
    ckpt = checkpoints(arch)
    losses = validate(data_bin, ckpt, "--task", "translation", "--valid-subset", "valid,test", "--batch-size", "8")
    # fairseq-validate's loss is the training's validation loss (what its log prints, kept in the checkpoint)
    assert losses["valid_loss"] == pytest.approx(rh.load_checkpoint(ckpt)["extra_state"]["val_loss"], abs=1e-3)
    # --score-reference: each sentence's score is the mean of its per-token scores, and the
    # per-token scores of the whole test set average to fairseq-validate's NLL (bits per token)
    scored = generate(data_bin, ckpt, tmp_path, "--score-reference", "--batch-size", "64")
    tokens: List[float] = []
    for i, ((score, _),) in scored.get("H").items():
        (positional,) = scored.get("P")[i]
        per_token = [float(v) for v in positional[-1].split()]
        assert float(score) == pytest.approx(sum(per_token) / len(per_token), abs=1e-3), i
        tokens += per_token
    assert -sum(tokens) / len(tokens) == pytest.approx(losses["test_nll_loss"], abs=1e-3)


@pytest.mark.parametrize("arch", ARCHS)
def test_interactive_awkward_lines_and_constraints(arch, data_bin, checkpoints, tmp_path, capsys):
    """fairseq-interactive: one translation per input line, also for lines fairseq-dense-interactive refuses."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import interactive

    lines = ["", "   ", " ".join("abcdefgh"[i % 8] for i in range(300)), "xyz qqq", "a b c\tA"]
    source = tmp_path / "input.txt"
    source.write_text("".join(line + "\n" for line in lines))
    args = options.parse_args_and_arch(options.get_interactive_generation_parser(), [
        str(data_bin), "--path", str(checkpoints(arch)), "--cpu", "--input", str(source), "--beam", "5",
        "--constraints",
    ])  # fmt: skip
    capsys.readouterr()
    interactive.main(convert_namespace_to_omegaconf(args))
    out = Generated(capsys.readouterr().out)
    assert sorted(out.hyps()) == list(range(len(lines))), out.text[-2000:]
    assert [s[-1] for (s,) in out.get("C").values()] == ["A"]
    assert "A" in out.hyps()[4][0].split(), out.hyps()[4]  # the constraint holds


@pytest.mark.parametrize("arch", ARCHS)
def test_hub_translate_equals_generate(arch, data_bin, checkpoints, tmp_path, baseline):
    """``<Model>.from_pretrained(save_dir, checkpoint, data_name_or_path=...).translate(beam=5)``."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    ckpt = checkpoints(arch)
    base = _baseline(arch, data_bin, checkpoints, tmp_path, baseline)
    hub = ARCH_MODEL_REGISTRY[arch].from_pretrained(str(ckpt.parent), ckpt.name, data_name_or_path=str(data_bin))
    ids, sources = zip(*sorted(base.sources().items()))
    assert hub.translate(list(sources), beam=5) == [base.hyps()[i][0] for i in ids]
