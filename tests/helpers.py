"""Shared test helpers: tiny dictionaries, tasks, batches, corpora and model checks.

fairseq's own ``tests/`` package is not in its wheel, so these are ours. Every
model family's tests use the ``check_*`` functions, so each family is held to the
same properties (shapes, gradients, incremental == full, reorder, padding).
"""

import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Optional

import pytest
import torch
from fairseq.data import Dictionary

from benchmarks.op_counts import onednn_lstm_runs

REPO = Path(__file__).resolve().parents[1]
USER_DIR = REPO / "user_dir"
SHARED_DATA = REPO.parent / "shared" / "data"
BIN = Path(sys.executable).parent

#: ``onednn`` values for ``benchmarks.op_counts.cpu_lstm_kernel``: a test of LSTMs under CPU bfloat16
#: autocast runs on oneDNN's kernel where the CPU has it and on PyTorch's per-step form everywhere
BF16_LSTM_KERNELS = [
    pytest.param(
        True,
        id="onednn",
        marks=pytest.mark.skipif(
            not onednn_lstm_runs(torch.bfloat16),
            reason="this CPU has no bfloat16 oneDNN LSTM (torch.ops.mkldnn._is_mkldnn_bf16_supported() is False)",
        ),
    ),
    pytest.param(False, id="per_step"),
]


def dummy_dictionary(vocab_size: int = 16) -> Dictionary:
    """A dictionary with the 4 special symbols plus ``vocab_size`` letters-like words."""
    d = Dictionary()
    for i in range(vocab_size):
        d.add_symbol(f"w{i}")
    d.finalize(padding_factor=1)
    return d


def build_tiny(model_cls, config_cls, shape: dict, vocab: int = 16, **overrides):
    """``(model, dictionary)``: ``model_cls`` built from ``config_cls(**shape, **overrides)`` on a
    ``vocab``-word dictionary, the parameters drawn after ``torch.manual_seed(0)``."""
    torch.manual_seed(0)
    d = dummy_dictionary(vocab)
    return model_cls.build_model(config_cls(**{**shape, **overrides}), DummyTask(d)), d


class DummyTask:
    """Just what ``build_model`` reads from a translation task."""

    def __init__(self, src_dict: Dictionary, tgt_dict: Optional[Dictionary] = None):
        self.source_dictionary = src_dict
        self.target_dictionary = tgt_dict if tgt_dict is not None else src_dict
        self.cfg = SimpleNamespace(max_source_positions=1024, max_target_positions=1024)


def random_tokens(d: Dictionary, lengths: List[int], left_pad: bool, seed: int = 0, eos: bool = True):
    """A padded ``(batch, max_len)`` tensor of random non-special tokens ending in EOS."""
    g = torch.Generator().manual_seed(seed)
    max_len = max(lengths)
    out = torch.full((len(lengths), max_len), d.pad(), dtype=torch.long)
    for i, n in enumerate(lengths):
        toks = torch.randint(d.nspecial, len(d), (n,), generator=g)
        if eos:
            toks[-1] = d.eos()
        if left_pad:
            out[i, max_len - n :] = toks
        else:
            out[i, :n] = toks
    return out


def make_sample(d: Dictionary, src_lengths=(5, 7, 3), tgt_lengths=(4, 6, 5), left_pad_source=True, seed=0):
    """A translation batch as fairseq's ``LanguagePairDataset`` collates it."""
    src = random_tokens(d, list(src_lengths), left_pad=left_pad_source, seed=seed)
    tgt = random_tokens(d, list(tgt_lengths), left_pad=False, seed=seed + 1)
    prev = tgt.clone()
    # prev_output_tokens = [eos, y_1 .. y_{n-1}], right-padded
    for i, n in enumerate(tgt_lengths):
        prev[i, 0] = d.eos()
        prev[i, 1:n] = tgt[i, : n - 1]
    return {
        "id": torch.arange(len(src_lengths)),
        "nsentences": len(src_lengths),
        "ntokens": int(sum(tgt_lengths)),
        "net_input": {
            "src_tokens": src,
            "src_lengths": torch.tensor(src_lengths),
            "prev_output_tokens": prev,
        },
        "target": tgt,
    }


# ---------------------------------------------------------------- model checks


def _tgt_mask(sample, d):
    return sample["target"].ne(d.pad())


def check_output_shape(model, sample, vocab_size: int) -> None:
    model.eval()
    out, extra = model(**sample["net_input"])
    b, t = sample["net_input"]["prev_output_tokens"].shape
    assert out.shape == (b, t, vocab_size), out.shape
    assert isinstance(extra, dict)


def check_all_params_get_finite_grads(model, sample) -> None:
    """Every trainable parameter receives a finite, non-None gradient (no unused parameters)."""
    model.train()
    model.zero_grad()
    out, _ = model(**sample["net_input"])
    lprobs = torch.log_softmax(out.float(), dim=-1)
    loss = -lprobs.gather(-1, sample["target"].unsqueeze(-1)).squeeze(-1)
    loss.masked_fill(~sample["target"].ne(1), 0.0).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, f"parameters without gradient: {missing}"
    bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    assert not bad, f"non-finite gradients: {bad}"


def incremental_decode(model, src_tokens, src_lengths, prev_output_tokens, new_order=None):
    """Run the decoder step by step; optionally reorder the state once after step 1.

    Returns ``(batch, tgt_len, vocab)`` log-probabilities.
    """
    enc = model.encoder(src_tokens, src_lengths=src_lengths)
    state: Dict = {}
    steps = []
    for t in range(prev_output_tokens.size(1)):
        out, _ = model.decoder(prev_output_tokens[:, : t + 1], encoder_out=enc, incremental_state=state)
        steps.append(torch.log_softmax(out[:, -1:].float(), dim=-1))
        if new_order is not None and t == 0:
            enc = model.encoder.reorder_encoder_out(enc, new_order)
            model.decoder.reorder_incremental_state_scripting(state, new_order)
            prev_output_tokens = prev_output_tokens.index_select(0, new_order)
            steps = [s.index_select(0, new_order) for s in steps]
    return torch.cat(steps, dim=1)


def check_incremental_equals_full(model, sample, atol: float = 1e-5) -> float:
    """Step-by-step decoding equals the full forward pass at every non-pad position."""
    model.eval()
    ni = sample["net_input"]
    with torch.no_grad():
        full, _ = model(**ni)
        full = torch.log_softmax(full.float(), dim=-1)
        inc = incremental_decode(model, ni["src_tokens"], ni["src_lengths"], ni["prev_output_tokens"])
    mask = ni["prev_output_tokens"].ne(model.decoder.dictionary.pad())
    diff = (full - inc).abs().amax(dim=-1)[mask].max().item()
    assert diff < atol, f"incremental vs full max abs diff {diff}"
    return diff


def check_reorder_incremental_state(model, sample, atol: float = 1e-5) -> None:
    """Reordering the cache by a permutation equals decoding the permuted batch."""
    model.eval()
    ni = sample["net_input"]
    b = ni["src_tokens"].size(0)
    perm = torch.arange(b - 1, -1, -1, device=ni["src_tokens"].device)
    with torch.no_grad():
        reordered = incremental_decode(model, ni["src_tokens"], ni["src_lengths"], ni["prev_output_tokens"], perm)
        direct = incremental_decode(
            model, ni["src_tokens"][perm], ni["src_lengths"][perm], ni["prev_output_tokens"][perm]
        )
    mask = ni["prev_output_tokens"][perm].ne(model.decoder.dictionary.pad())
    diff = (reordered - direct).abs().amax(dim=-1)[mask].max().item()
    assert diff < atol, f"reordered vs permuted-batch max abs diff {diff}"


def beam_search(model, d: Dictionary, sample, beam: int = 4, cached: bool = True):
    """fairseq's beam search (at most 8 tokens); ``cached=False`` re-runs the full decoder
    at every step instead of using the incremental state."""
    from fairseq.sequence_generator import SequenceGenerator

    gen = SequenceGenerator([model], d, beam_size=beam, max_len_a=0, max_len_b=8, min_len=1)
    if not cached:
        gen.model.has_incremental = False
    with torch.no_grad():
        return gen.generate([model], sample)


def assert_same_hypotheses(got, want, atol: float) -> None:
    """Two beam searches found the same hypotheses, in the same order, with the same scores."""
    assert len(got) == len(want)
    for g_hyps, w_hyps in zip(got, want):
        assert [h["tokens"].tolist() for h in g_hyps] == [h["tokens"].tolist() for h in w_hyps]
        for g, w in zip(g_hyps, w_hyps):
            torch.testing.assert_close(g["positional_scores"], w["positional_scores"], atol=atol, rtol=0)


def flip_padding(tokens: torch.Tensor, pad: int) -> torch.Tensor:
    """Left-padded <-> right-padded, row by row."""
    out = torch.full_like(tokens, pad)
    for i, row in enumerate(tokens):
        toks = row[row.ne(pad)]
        if tokens[:, 0].eq(pad).any():  # currently left-padded -> right
            out[i, : len(toks)] = toks
        else:
            out[i, tokens.size(1) - len(toks) :] = toks
    return out


def check_padding_invariance(model, sample, atol: float = 1e-5) -> None:
    """Left- and right-padded sources give the same outputs."""
    model.eval()
    ni = dict(sample["net_input"])
    pad = model.encoder.dictionary.pad()
    with torch.no_grad():
        a, _ = model(**ni)
        ni["src_tokens"] = flip_padding(ni["src_tokens"], pad)
        assert not torch.equal(ni["src_tokens"], sample["net_input"]["src_tokens"])
        b, _ = model(**ni)
    mask = ni["prev_output_tokens"].ne(model.decoder.dictionary.pad())
    diff = (a - b).abs().amax(dim=-1)[mask].max().item()
    assert diff < atol, f"left vs right padding max abs diff {diff}"


# ---------------------------------------------------------------- corpora and CLI


def write_copy_corpus(
    directory: Path, n_train=2000, n_valid=100, n_test=100, vocab=12, seed=0, src="src", tgt="tgt", min_len=3, max_len=8
) -> Path:
    """A copy-like task: the target is the source with every letter upper-cased."""
    rng = random.Random(seed)
    letters = [chr(ord("a") + i) for i in range(vocab)]
    directory.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("valid", n_valid), ("test", n_test)):
        with open(directory / f"{split}.{src}", "w") as fs, open(directory / f"{split}.{tgt}", "w") as ft:
            for _ in range(n):
                words = [rng.choice(letters) for _ in range(rng.randint(min_len, max_len))]
                fs.write(" ".join(words) + "\n")
                ft.write(" ".join(w.upper() for w in words) + "\n")
    return directory


def run_cli(tool: str, *args, cwd=None, check=True, env=None) -> subprocess.CompletedProcess:
    """Run a fairseq console script of this environment, capturing output."""
    exe = BIN / tool
    cmd = [str(exe) if exe.exists() else tool, *map(str, args)]
    full_env = dict(os.environ, **(env or {}))
    full_env.setdefault("OMP_NUM_THREADS", "1")
    full_env.setdefault("MKL_NUM_THREADS", "1")
    full_env.setdefault("FAIRSEQ_DENSE_CLI", "1")  # one-line errors, a clean exit (fairseq_dense.cli.fairseq_tools)
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=full_env)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return proc


def preprocess(raw: Path, dest: Path, src="src", tgt="tgt") -> Path:
    run_cli(
        "fairseq-preprocess",
        "--source-lang",
        src,
        "--target-lang",
        tgt,
        "--trainpref",
        raw / "train",
        "--validpref",
        raw / "valid",
        "--testpref",
        raw / "test",
        "--destdir",
        dest,
        "--workers",
        "1",
        "--joined-dictionary",
    )
    return dest


def hypotheses_from_generate(stdout: str) -> Dict[int, str]:
    """Parse ``H-<id>\\tscore\\ttext`` lines of fairseq-generate."""
    hyps = {}
    for line in stdout.splitlines():
        if line.startswith("H-"):
            idx, _score, text = line.split("\t", 2)
            hyps[int(idx[2:])] = text
    return hyps


def references_from_generate(stdout: str) -> Dict[int, str]:
    refs = {}
    for line in stdout.splitlines():
        if line.startswith("T-"):
            idx, text = line.split("\t", 1)
            refs[int(idx[2:])] = text
    return refs


def autograd_node_counts(output: torch.Tensor) -> Dict[str, int]:
    """How often each autograd node type occurs in the graph that produced ``output``."""
    counts: Dict[str, int] = {}
    seen, stack = set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        name = type(node).__name__
        counts[name] = counts.get(name, 0) + 1
        stack.extend(n for n, _ in node.next_functions)
    return counts
