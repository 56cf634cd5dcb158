"""fairseq-generate's everyday options on one tiny checkpoint per family (the contract matrix).

One tiny checkpoint per family, trained once for this file (in this process,
fairseq's own ``fairseq_cli.train``), is decoded by ``fairseq_cli.generate.main``
(what the ``fairseq-generate`` command runs, without paying fairseq's import per
case) with each option a fairseq user reaches for. Every cell either passes or is
one of fairseq's own gaps, pinned down in ``tests/test_fairseq_gaps.py``.
"""

import re
from typing import Dict, List

import pytest

from tests import reliability_helpers as rh

pytestmark = pytest.mark.slow

ARCHS = rh.tiny_archs()
UPDATES = 30


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    return rh.tiny_corpus(tmp_path_factory.mktemp("matrix_data"), 48)  # 6 updates per epoch


@pytest.fixture(scope="module")
def checkpoints(data_bin, tmp_path_factory):
    """``checkpoint(arch)``: its ``checkpoint_last.pt`` after ``UPDATES`` updates, trained on first use."""
    root, done = tmp_path_factory.mktemp("matrix_ckpt"), {}

    def checkpoint(arch: str):
        if arch not in done:
            save = root / arch
            rh.train_inprocess(
                rh.base_train_args(
                    data_bin,
                    save,
                    arch,
                    UPDATES,
                    "--optimizer",
                    "adam",
                    "--lr",
                    "0.005",
                    "--batch-size",
                    "8",
                    "--disable-validation",
                )
            )
            done[arch] = save / "checkpoint_last.pt"
        return done[arch]

    return checkpoint


class Generated:
    """The parsed output of one ``fairseq-generate`` run: per sentence id, its S/T/H/P/A lines."""

    def __init__(self, text: str):
        self.text = text
        self.lines: Dict[str, Dict[int, List[List[str]]]] = {}
        for line in text.splitlines():
            m = re.match(r"^([STHDPA])-(\d+)\t(.*)$", line)
            if m:
                self.lines.setdefault(m.group(1), {}).setdefault(int(m.group(2)), []).append(m.group(3).split("\t"))

    def hyps(self, with_scores: bool = False) -> Dict[int, List[str]]:
        """Hypothesis texts (or ``score<TAB>text``) of every sentence, best first."""
        return {i: ["\t".join(h) if with_scores else h[-1] for h in hs] for i, hs in self.lines.get("H", {}).items()}

    def get(self, kind: str) -> Dict[int, List[List[str]]]:
        return self.lines.get(kind, {})


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
