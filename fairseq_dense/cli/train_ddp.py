"""Data-parallel ``fairseq-train`` through torchrun, on CPUs (gloo) and GPUs (NCCL).

``fairseq-train --cpu --distributed-world-size 2`` asserts that there are no devices, and a plain
``torchrun ... fairseq-train`` runs independent trainings (fairseq infers the world size from the
GPUs). This launcher starts ``N`` processes per node with torchrun; each runs :func:`rank_main`,
which adds the distributed flags of its rank and calls fairseq's training entry point::

    fairseq-dense-train-ddp --nproc 2 data-bin --arch gru_attention_tiny --cpu ...

Several nodes: the same command on every node with ``--nnodes``, ``--node-rank`` and ``--master-addr``/``--master-port``
(or ``--rdzv-endpoint``); see ``docs/reliability.md``.
"""

import argparse
import logging
import os
import sys
from typing import List, Optional, Sequence

from fairseq_dense import resume
from fairseq_dense.checkpoints import safe_loading
from fairseq_dense.data.prepare import positive
from fairseq_dense.logging_setup import configure_logging
from fairseq_dense.threads import THREADS_ENV, choose_threads

logger = logging.getLogger(__name__)

#: Flags that this launcher sets on every rank; passing them by hand is an error.
MANAGED_FLAGS = (
    "--distributed-init-method", "--distributed-world-size", "--distributed-rank", "--distributed-no-spawn",
    "--device-id",
)  # fmt: skip


def _has_flag(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _managed_flag(args: Sequence[str]) -> Optional[str]:
    return next((f for f in MANAGED_FLAGS if _has_flag(args, f)), None)


def distributed_args(
    train_args: Sequence[str], rank: int, world_size: int, local_rank: int, backend: Optional[str] = None
) -> List[str]:
    """``train_args`` followed by the distributed flags of global ``rank`` (``local_rank`` on its node); ``backend``:
    ``gloo`` with ``--cpu`` or without CUDA, else ``nccl``. A flag this launcher manages is a ``ValueError``."""
    if flag := _managed_flag(train_args):
        raise ValueError(f"{flag} is set by fairseq-dense-train-ddp; remove it from the arguments")
    cpu = _has_flag(train_args, "--cpu")
    if backend is None:
        import torch

        backend = "gloo" if cpu or not torch.cuda.is_available() else "nccl"
    out = [*train_args, "--distributed-init-method", "env://", "--distributed-world-size", str(world_size)]
    out += ["--distributed-rank", str(rank), "--device-id", str(0 if cpu else local_rank), "--distributed-no-spawn"]
    if not _has_flag(train_args, "--distributed-backend"):
        out += ["--distributed-backend", backend]
    if cpu and not _has_flag(train_args, "--ddp-backend"):
        out += ["--ddp-backend", "legacy_ddp"]  # one flat all-reduce buffer: fewer gloo calls than c10d
    return out


def run_train(train_args: Sequence[str]) -> None:
    """Run ``fairseq-train`` with ``train_args`` in this process (fairseq's ``cli_main``)."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils
    from fairseq_cli import train

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=list(train_args))
    cfg = convert_namespace_to_omegaconf(args)
    distributed_utils.call_main(cfg, train.main)


#: the launcher's process id, for its ranks (:func:`end_with_launcher`)
LAUNCHER_ENV = "FAIRSEQ_DENSE_LAUNCHER_PID"


def end_with_launcher() -> None:
    """In a rank that ``fairseq-dense-train-ddp`` started: the system kills this process when its launcher dies,
    however that ends (Linux ``PR_SET_PDEATHSIG``; torchrun starts the ranks from the launcher's main thread), so
    no rank trains on unsupervised; a rank whose launcher is already gone ends at once."""
    launcher = os.environ.get(LAUNCHER_ENV)
    if not launcher or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1: PR_SET_PDEATHSIG
    if os.getppid() != int(launcher):
        raise SystemExit(f"fairseq-dense-train-ddp: error: the launcher (process {launcher}) has ended")


def rank_main(train_args: Sequence[str], backend: Optional[str] = None) -> None:
    """Entry point of one torchrun worker: train with the distributed flags of this rank."""
    end_with_launcher()
    try:
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    except KeyError as e:
        raise SystemExit(f"fairseq-dense-train-ddp: {e.args[0]} is not set; start workers through torchrun")
    with safe_loading(resume.broadcast_globals()):  # fairseq's resume under any task (loading_globals)
        run_train(distributed_args(train_args, rank, world_size, local_rank, backend))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fairseq-dense-train-ddp",
        allow_abbrev=False,
        description="Data-parallel fairseq-train through torchrun (gloo on CPU, NCCL on GPU). "
        "Every argument not listed here goes to fairseq-train.",
    )
    p.add_argument("--nproc", type=positive(int), help="processes per node (default: number of GPUs, or 2 with --cpu)")
    p.add_argument("--nnodes", default="1", help="number of nodes, or MIN:MAX for elastic runs")
    p.add_argument("--node-rank", type=int, default=0, help="rank of this node (static rendezvous)")
    p.add_argument("--master-addr", default="127.0.0.1", help="address of node 0 (static rendezvous)")
    p.add_argument("--master-port", type=int, default=29500, help="port on node 0 (static rendezvous)")
    p.add_argument("--rdzv-endpoint", help="host:port of a c10d rendezvous (instead of --master-addr/--node-rank)")
    p.add_argument("--rdzv-id", default="fairseq-dense", help="job id for the c10d rendezvous")
    text = "torch.distributed backend (default: gloo with --cpu, else nccl)"
    p.add_argument("--backend", choices=("gloo", "nccl"), help=text)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p


def torchrun_args(
    opts: argparse.Namespace, train_args: Sequence[str], worker_module: str = "fairseq_dense.cli.train_ddp"
) -> List[str]:
    """The ``torch.distributed.run`` arguments that start ``worker_module`` (tests substitute their own) as
    workers, with the launcher's ``opts`` and the ``fairseq-train`` arguments after ``--worker ... --``."""
    nproc = opts.nproc
    if nproc is None:
        import torch

        nproc = torch.cuda.device_count() if torch.cuda.is_available() and "--cpu" not in train_args else 2
    out = ["--nproc_per_node", str(nproc)]
    if opts.nnodes == "1":
        out += ["--standalone"]
    elif opts.rdzv_endpoint:
        out += ["--nnodes", opts.nnodes, "--rdzv_backend", "c10d", "--rdzv_endpoint", opts.rdzv_endpoint]
        out += ["--rdzv_id", opts.rdzv_id]
    else:
        out += ["--nnodes", opts.nnodes, "--node_rank", str(opts.node_rank), "--master_addr", opts.master_addr]
        out += ["--master_port", str(opts.master_port)]
    worker = ["-m", worker_module, "--worker"]
    if opts.backend:
        worker += ["--backend", opts.backend]
    return out + worker + ["--"] + list(train_args)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """``fairseq-dense-train-ddp``: launch (or, with ``--worker``, be) one rank."""
    argv = list(sys.argv[1:] if argv is None else argv)
    i = argv.index("--") if "--" in argv else len(argv)  # everything after "--" goes to fairseq-train untouched
    opts, rest = build_parser().parse_known_args(argv[:i])
    train_args = rest + argv[i + 1 :]
    if opts.worker:
        from fairseq_dense.cli.fairseq_tools import set_up

        set_up("fairseq-dense-train-ddp")  # one-line errors per rank, fairseq's checkpoints read, a clean exit
        rank_main(train_args, opts.backend)
        return
    if not train_args:
        build_parser().error("no fairseq-train arguments given")
    if flag := _managed_flag(train_args):
        build_parser().error(f"{flag} is set by the launcher; remove it")
    from torch.distributed.run import main as torchrun_main

    configure_logging()
    targs = torchrun_args(opts, train_args)
    n, reason = choose_threads()
    if not reason.startswith(f"{THREADS_ENV}="):  # unset (torchrun: 1 per rank) or invalid: share out the idle CPUs
        nproc = int(targs[targs.index("--nproc_per_node") + 1])
        os.environ[THREADS_ENV] = str(max(1, n // nproc))
        logger.info("%s CPU thread(s) per rank (%s, %d ranks on this node)", os.environ[THREADS_ENV], reason, nproc)
    logger.info("torchrun %s", " ".join(targs))
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    os.environ[LAUNCHER_ENV] = str(os.getpid())  # the ranks' parent (end_with_launcher)
    try:
        torchrun_main(targs)
    except ChildFailedError as e:
        # each rank has printed its own error; replace torchrun's report with one line
        ranks = ", ".join(map(str, sorted(e.failures)))
        codes = ", ".join(map(str, sorted({f.exitcode for f in e.failures.values()})))
        what = f"rank(s) {ranks} failed with exit code {codes}; their errors are printed above"
        raise SystemExit(f"fairseq-dense-train-ddp: error: {what}")
    finally:
        del os.environ[LAUNCHER_ENV]


if __name__ == "__main__":
    main()
