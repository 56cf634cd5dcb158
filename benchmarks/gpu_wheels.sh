#!/usr/bin/env bash
# Prepare, on a machine with network, the wheels the GPU machine lacks (Python 3.12, torch + CUDA, no
# fairseq) into .gpu/whl (ignored by git; copied to the GPU machine with the tree), then check them in a clean
# Python 3.12 environment: installed with the GPU machine's command into a --target folder, imported.
#
#   benchmarks/gpu_wheels.sh              # download + build + check
#   CHECK=0 benchmarks/gpu_wheels.sh      # download + build only
#
# Environment: DEST (.gpu/whl), PY312 (a python3.12 for the check; default: pyenv's 3.12, else
# python3.12 on the PATH), TORCH_INDEX + TORCH_SPEC (an index with a Python 3.12 CPU torch, and which:
# "torch==2.11.0"; without them the check stops short of importing fairseq itself, which needs torch),
# PIP (python3 -m pip, used for the downloads), EXTRA (more requirement specifiers: `import fairseq` also
# needs scikit-learn (fairseq's task registry imports it), which with scipy would take the folder past the
# 64 MiB that travels with a command; the GPU machine is expected to have it, gpu_figures.sh says if not).
set -euo pipefail
DEST=${DEST:-.gpu/whl}
PIP=${PIP:-python3 -m pip}
CHECK=${CHECK:-1}
TORCH_SPEC=${TORCH_SPEC:-torch==2.11.0}
# only what the GPU image lacks (by the GPU machine's package list it has torch, numpy,
# sacrebleu, regex, tqdm, click, joblib, PyYAML, pytest, safetensors, huggingface-hub, scipy, scikit-learn),
# pinned to the versions the CPU environment (make venv) tests with
PKGS=(fairseq-fixed==0.12.3.1 hydra-core==1.3.2 omegaconf==2.3.0 bitarray==3.12.3 sacremoses==0.2.0
      subword-nmt==0.3.8 ${EXTRA:-})
mkdir -p "$DEST"
$PIP download --quiet --no-deps --dest "$DEST" --python-version 3.12 --implementation cp --abi cp312 \
    --only-binary=:all: --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform any "${PKGS[@]}"
# omegaconf 2.3 needs antlr4-python3-runtime 4.9.*, published as an sdist only: build its (pure Python) wheel
ls "$DEST"/antlr4_python3_runtime-4.9.3-*.whl >/dev/null 2>&1 \
    || $PIP wheel --quiet --no-deps --wheel-dir "$DEST" antlr4-python3-runtime==4.9.3
du -sh "$DEST"
ls "$DEST"
[ "$CHECK" = 1 ] || exit 0

PY312=${PY312:-$(ls "$HOME"/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -1)}
PY312=${PY312:-$(command -v python3.12 || true)}
if [ -z "$PY312" ]; then
    echo "no python3.12 found: the install was not checked (set PY312)" >&2
    exit 1
fi
CHECK_DIR=$(mktemp -d -t gpu-wheels-check.XXXX)
echo "checking with $PY312 in $CHECK_DIR"
"$PY312" -m venv "$CHECK_DIR/venv"
# the GPU machine's own packages (those the project uses), and torch where a Python 3.12 build can be had (TORCH_INDEX)
"$CHECK_DIR/venv/bin/pip" install --quiet numpy sacrebleu regex tqdm click joblib pyyaml pytest safetensors \
    huggingface_hub scipy scikit-learn
if [ -n "${TORCH_INDEX:-}" ]; then
    "$CHECK_DIR/venv/bin/pip" install --quiet --index-url "$TORCH_INDEX" "$TORCH_SPEC"
fi
# the GPU machine's command, word for word
"$CHECK_DIR/venv/bin/pip" install --quiet --no-index --no-deps --target "$CHECK_DIR/site" "$DEST"/*.whl
PYTHONPATH="$PWD:$CHECK_DIR/site" PATH="$CHECK_DIR/site/bin:$PATH" "$CHECK_DIR/venv/bin/python" - "$CHECK_DIR/site" <<'PYEOF'
import glob
import importlib
import importlib.util
import os
import sys

site = sys.argv[1]
for name in ("hydra", "omegaconf", "sacremoses", "bitarray", "subword_nmt", "antlr4"):
    assert importlib.import_module(name).__file__.startswith(site), name
# fairseq's compiled extensions need only numpy: load each one
for so in sorted(glob.glob(os.path.join(site, "fairseq", "**", "*.so"), recursive=True)):
    name = os.path.basename(so).split(".")[0]
    spec = importlib.util.spec_from_file_location(name, so)
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        print("ok: loads", os.path.relpath(so, site))
    except ImportError as e:  # torch's own libraries (libc10.so) or the torch module
        if "torch" in sys.modules or not (getattr(e, "name", None) == "torch" or "libc10" in str(e)):
            raise
        print("needs torch, not loaded here:", os.path.relpath(so, site))
print(f"ok: python {sys.version.split()[0]}: every package imports from the --target folder")
try:
    import torch
except ImportError:
    print("torch is absent here (no Python 3.12 CPU build; set TORCH_INDEX): fairseq itself not imported")
    sys.exit(0)
import fairseq
import fairseq_dense  # noqa: F401  (registers every model with fairseq)
from fairseq.models import ARCH_MODEL_REGISTRY

from benchmarks import gpu_figures  # noqa: F401

assert "deep_att" in ARCH_MODEL_REGISTRY and "transformer" in ARCH_MODEL_REGISTRY
print(f"ok: torch {torch.__version__}, fairseq {fairseq.__version__}, fairseq_dense registered")
PYEOF
echo "the check environment stays in $CHECK_DIR (remove it when done)"
