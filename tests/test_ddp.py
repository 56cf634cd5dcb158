"""Data-parallel training through ``fairseq-dense-train-ddp`` (torchrun, gloo, ``--cpu``).

For every ``*_tiny`` architecture: 2 processes x batch B for a few updates end with
the same parameters (within 1e-5) as 1 process x batch 2B, same seed. The
training set holds exactly 2B sentences, so every epoch is one update: one batch
of 2B in the single process, one batch of B on each rank (which rank gets which
half does not matter: gradients are summed). Dropout is off (the masks of a 2B
batch cannot equal those of two B batches) and the optimizer is SGD with
momentum (Adam's first steps amplify rounding differences of near-zero gradients).

All architectures train in ONE torchrun launch (``tests/ddp_worker.py`` calls the
launcher's per-rank entry point for each), while the single-process references
train in this process.
"""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from fairseq_dense.cli import train_ddp
from tests import helpers
from tests import reliability_helpers as rh

pytestmark = pytest.mark.slow

B = 8
UPDATES = 3
OPT = ["--optimizer", "sgd", "--lr", "0.5", "--momentum", "0.9", "--disable-validation"]


def _args(bin_dir, save_dir, arch, batch):
    return rh.base_train_args(
        bin_dir, save_dir, arch, UPDATES, *OPT, "--batch-size", str(batch), *rh.zero_dropout_args(arch)
    )


def _on_simplex(t: torch.Tensor) -> bool:
    return bool((t >= -1e-6).all()) and torch.allclose(t.sum(-1), torch.ones(()), atol=1e-5)


def test_two_processes_equal_one_process_with_double_batch(tmp_path):
    archs = rh.tiny_archs()
    bin_dir = rh.tiny_corpus(tmp_path / "data", n_train=2 * B)
    runs = [_args(bin_dir, tmp_path / "ddp" / arch, arch, B) for arch in archs]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(runs))
    opts = train_ddp.build_parser().parse_args(["--nproc", "2"])
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *train_ddp.torchrun_args(opts, [str(spec)], worker_module="tests.ddp_worker"),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ddp = subprocess.Popen(cmd, cwd=helpers.REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for arch in archs:  # the references train while the workers start
            rh.train_inprocess(_args(bin_dir, tmp_path / "single" / arch, arch, 2 * B))
        out, _ = ddp.communicate(timeout=600)
    finally:
        if ddp.poll() is None:
            ddp.kill()
    assert ddp.returncode == 0, out[-5000:]

    for arch in archs:
        single = rh.load_checkpoint(tmp_path / "single" / arch / "checkpoint_last.pt")
        multi = rh.load_checkpoint(tmp_path / "ddp" / arch / "checkpoint_last.pt")
        assert multi["optimizer_history"][-1]["num_updates"] == UPDATES
        assert multi["cfg"]["distributed_training"]["distributed_world_size"] == 2
        diff = rh.max_abs_diff(single["model"], multi["model"])
        assert diff <= 1e-5, f"{arch}: 2 x B vs 1 x 2B parameters differ by {diff}"
        # branch weights (Weighted Transformer's kappa/alpha) stay on the simplex under DDP
        for name, t in single["model"].items():
            if name.rsplit(".", 1)[-1] in ("kappa", "alpha") and _on_simplex(t):
                assert _on_simplex(multi["model"][name]), f"{arch}: {name} left the simplex under DDP"


def test_launcher_builds_rank_arguments():
    args = train_ddp.distributed_args(["bin", "--cpu", "--arch", "x"], rank=1, world_size=2, local_rank=1)
    assert args[:4] == ["bin", "--cpu", "--arch", "x"]
    joined = " ".join(args)
    for part in (
        "--distributed-init-method env://",
        "--distributed-world-size 2",
        "--distributed-rank 1",
        "--distributed-no-spawn",
        "--distributed-backend gloo",
        "--ddp-backend legacy_ddp",
        "--device-id 0",
    ):
        assert part in joined
    gpu = train_ddp.distributed_args(["bin"], rank=3, world_size=8, local_rank=3, backend="nccl")
    assert "--distributed-backend nccl" in " ".join(gpu) and "--device-id 3" in " ".join(gpu)
    assert "--ddp-backend" not in gpu
    with pytest.raises(ValueError, match="--distributed-world-size is set by fairseq-dense-train-ddp"):
        train_ddp.distributed_args(["bin", "--distributed-world-size", "4"], 0, 2, 0)


def test_launcher_torchrun_command(monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr("torch.distributed.run.main", lambda a: seen.setdefault("args", a))
    train_ddp.main(["--nproc", "2", "bin", "--cpu", "--lr", "0.1"])
    a = seen["args"]
    assert a[:3] == ["--nproc_per_node", "2", "--standalone"]
    assert a[a.index("-m") + 1 : a.index("--")] == ["fairseq_dense.cli.train_ddp", "--worker"]
    assert a[a.index("--") + 1 :] == ["bin", "--cpu", "--lr", "0.1"]
    for bad in ("0", "many"):  # ignored, as the other commands ignore it, not passed on (torch: every core per rank)
        monkeypatch.setenv("OMP_NUM_THREADS", bad)
        train_ddp.main(["--nproc", "2", "bin", "--cpu"])
        assert os.environ["OMP_NUM_THREADS"].isdigit() and int(os.environ["OMP_NUM_THREADS"]) >= 1, bad

    multi = train_ddp.torchrun_args(
        train_ddp.build_parser().parse_args(
            ["--nproc", "4", "--nnodes", "2", "--node-rank", "1", "--master-addr", "node0", "--backend", "nccl"]
        ),
        ["bin"],
    )
    assert multi[:10] == [
        "--nproc_per_node",
        "4",
        "--nnodes",
        "2",
        "--node_rank",
        "1",
        "--master_addr",
        "node0",
        "--master_port",
        "29500",
    ]
    assert "--backend" in multi and "nccl" in multi

    with pytest.raises(SystemExit):
        train_ddp.main(["--nproc", "2", "bin", "--distributed-rank", "0"])
    with pytest.raises(SystemExit) as e:  # a usage error, not a ValueError traceback
        train_ddp.main(["--nproc", "0", "bin", "--cpu"])
    assert e.value.code == 2 and "--nproc: must be a positive number, not 0" in capsys.readouterr().err

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    def failing(_):
        raise ChildFailedError("w", {1: ProcessFailure(local_rank=1, pid=1, exitcode=1, error_file="")})

    monkeypatch.setattr("torch.distributed.run.main", failing)
    with pytest.raises(SystemExit, match=r"^fairseq-dense-train-ddp: error: rank\(s\) 1 failed with exit code 1"):
        train_ddp.main(["--nproc", "2", "bin", "--cpu"])


def test_worker_outside_torchrun_says_so(monkeypatch):
    for var in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SystemExit, match="RANK is not set; start workers through torchrun"):
        train_ddp.main(["--worker", "--", "bin", "--cpu"])


@pytest.mark.skipif(not rh.FULL, reason="one launcher process per architecture; FAIRSEQ_DENSE_FULL_RELIABILITY=1")
@pytest.mark.parametrize("arch", rh.tiny_archs())
def test_console_launcher_end_to_end(arch, tmp_path):
    """The real ``python -m fairseq_dense.cli.train_ddp --nproc 2 ...`` per architecture."""
    bin_dir = rh.tiny_corpus(tmp_path / "data", n_train=2 * B)
    save = tmp_path / "ddp"
    proc = subprocess.run(
        [sys.executable, "-m", "fairseq_dense.cli.train_ddp", "--nproc", "2", *_args(bin_dir, save, arch, B)],
        cwd=helpers.REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    rh.train_inprocess(_args(bin_dir, tmp_path / "single", arch, 2 * B))
    diff = rh.max_abs_diff(
        rh.load_checkpoint(tmp_path / "single" / "checkpoint_last.pt")["model"],
        rh.load_checkpoint(save / "checkpoint_last.pt")["model"],
    )
    assert diff <= 1e-5


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int):
    """Process ids whose parent is ``pid`` (Linux /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _state(pid: int) -> str:
    """A process's state letter (``Z``: ended, not yet reaped), or ``""`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def _two_nodes(train_args, port):
    """Two ``fairseq-dense-train-ddp`` launchers on this machine: nodes 0 and 1, one CPU process each."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return [
        subprocess.Popen(
            [sys.executable, "-m", "fairseq_dense.cli.train_ddp", "--nnodes", "2", "--node-rank", str(rank)]
            + ["--master-addr", "127.0.0.1", "--master-port", str(port), "--nproc", "1", *train_args],
            cwd=helpers.REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for rank in (0, 1)
    ]


def _finish(nodes, timeout=300):
    outs = []
    for node in nodes:
        try:
            outs.append(node.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, 9)
            outs.append(node.communicate()[0])
    return outs


def test_two_nodes_on_one_machine_train_as_one_process_and_resume_after_a_kill(tmp_path):
    """``--nnodes 2`` with node ranks 0 and 1 (static rendezvous on 127.0.0.1, gloo, one CPU
    process per node) trains the model one process trains with the double batch; a SIGKILL of
    node 1's launcher ends its training process too, and after a restart of both launchers the
    run resumes and ends with the uninterrupted two-node run's checkpoint, bit for bit."""
    from fairseq_dense.checkpoints import read_info
    from fairseq_dense.resume import newest_loadable_checkpoint

    arch, updates = "gru_attention_tiny", 6
    bin_dir = rh.tiny_corpus(tmp_path / "data", n_train=2 * B)  # an epoch is one update: a save after each

    def args(save, batch):
        return rh.base_train_args(
            bin_dir, save, arch, updates, *OPT, "--batch-size", str(batch), *rh.zero_dropout_args(arch)
        )

    uninterrupted = _two_nodes(args(tmp_path / "two", B), _free_port())
    rh.train_inprocess(args(tmp_path / "one", 2 * B))  # while the nodes start
    outs = _finish(uninterrupted)
    assert [n.returncode for n in uninterrupted] == [0, 0], outs[0][-3000:] + outs[1][-3000:]
    two = rh.load_checkpoint(tmp_path / "two" / "checkpoint_last.pt")
    assert two["cfg"]["distributed_training"]["distributed_world_size"] == 2
    assert rh.max_abs_diff(rh.load_checkpoint(tmp_path / "one" / "checkpoint_last.pt")["model"], two["model"]) <= 1e-5

    save = tmp_path / "killed"
    nodes = _two_nodes(args(save, B), _free_port())
    deadline = time.monotonic() + 300
    while (info := read_info(str(save / "checkpoint_last.pt"))) is None or info.num_updates < 2:
        assert time.monotonic() < deadline and all(n.poll() is None for n in nodes), "the two nodes did not train"
        time.sleep(0.05)
    (worker,) = _children(nodes[1].pid)  # node 1's only training process
    os.kill(nodes[1].pid, 9)  # its launcher: the rank must not train on unsupervised (end_with_launcher)
    gone_by = time.monotonic() + 5  # PR_SET_PDEATHSIG acts at once
    while _state(worker) not in ("", "Z"):
        assert time.monotonic() < gone_by, f"rank {worker} outlived its killed launcher"
        time.sleep(0.05)
    outs = _finish(nodes, timeout=15)  # node 0's rank fails at its next all-reduce; its launcher is killed after 15 s
    assert nodes[1].returncode != 0, outs[1][-3000:]
    _, newest = newest_loadable_checkpoint(str(save), exclude="")
    assert newest < updates, "the kill came after the run ended"
    restarted = _two_nodes(args(save, B), _free_port())
    outs = _finish(restarted)
    assert [n.returncode for n in restarted] == [0, 0], outs[0][-3000:] + outs[1][-3000:]
    assert f"@ {newest} updates)" in outs[0], outs[0][-3000:]  # "Loaded checkpoint ... (epoch E @ U updates)"
    rh.assert_tensors_identical(
        rh.deterministic_parts(two), rh.deterministic_parts(rh.load_checkpoint(save / "checkpoint_last.pt")), arch
    )


def test_fairseqs_own_distributed_launch_resumes(tmp_path):
    """Two ``fairseq-train`` processes started as fairseq documents it (``--distributed-rank`` each, no
    fairseq-dense launcher) train, and a second launch resumes: rank 0 sends its checkpoint's state to
    rank 1 through torch's safe loader, which the task's start allows (``resume.broadcast_globals``)."""
    from fairseq_dense.checkpoints import num_updates

    bin_dir = rh.tiny_corpus(tmp_path / "data", n_train=2 * B)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for updates in (2, 4):
        port = _free_port()
        args = rh.base_train_args(
            bin_dir, tmp_path / "save", "gru_attention_tiny", updates, *OPT, "--batch-size", str(B)
        )
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "fairseq_cli.train",
                    *args,
                    "--user-dir",
                    str(helpers.REPO / "fairseq_dense"),
                    "--distributed-init-method",
                    f"tcp://127.0.0.1:{port}",
                    "--distributed-world-size",
                    "2",
                    "--distributed-rank",
                    str(rank),
                    "--device-id",
                    "0",
                    "--distributed-no-spawn",
                    "--distributed-backend",
                    "gloo",
                    "--ddp-backend",
                    "legacy_ddp",
                ],  # fmt: skip
                cwd=helpers.REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for rank in (0, 1)
        ]
        outs = [p.communicate(timeout=300)[0] for p in procs]
        assert all(p.returncode == 0 for p in procs), "\n".join(o[-3000:] for o in outs)
        assert num_updates(rh.load_checkpoint(tmp_path / "save" / "checkpoint_last.pt")) == updates
