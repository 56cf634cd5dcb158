# Sourced by the prepared GPU commands (benchmarks/gpu_figures.sh, examples/multi30k/gpu_seeds.sh):
# gpu_install makes fairseq importable on the GPU machine (Python 3.12, torch + CUDA, no fairseq, no
# network) and writes the versions and the GPU to $OUT/machine.txt. It installs the wheels prepared by
# benchmarks/gpu_wheels.sh (.gpu/whl, carried with the command) into $SITE only when fairseq does not
# import already (a rerun on the same machine installs nothing). Needs: log (a function), PYTHON, OUT,
# SITE, DEVICE; INSTALL_S caps the install (60 s). Exits 2 with one line when fairseq cannot be imported.

gpu_install() {
    export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
    if _gpu_probe; then
        log "install: fairseq imports already, nothing installed"
    else
        if ! ls .gpu/whl/*.whl >/dev/null 2>&1; then
            log "install: error: no wheels in .gpu/whl (prepare them with benchmarks/gpu_wheels.sh and copy .gpu/ along)"
            exit 2
        fi
        timeout -k 5 "${INSTALL_S:-60}" "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --upgrade \
            --target "$SITE" .gpu/whl/*.whl >"$OUT/install.log" 2>&1
        log "install: exit $? ($(ls .gpu/whl/*.whl | wc -l) wheels into $SITE)"
        if ! _gpu_probe; then
            log "error: fairseq does not import: $(grep -E 'Error' "$OUT/import.log" | tail -1) (add the wheel to .gpu/whl)"
            exit 2
        fi
    fi
    if [ "$DEVICE" = cuda ]; then
        nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >>"$OUT/machine.txt" 2>&1
    fi
    echo "cores $(nproc)" >>"$OUT/machine.txt"
    log "machine: $(grep -m1 "^python" "$OUT/machine.txt")"
}

_gpu_probe() {  # the versions, or why fairseq does not import
    "$PYTHON" -c "import sys, torch, fairseq; print('python', sys.version.split()[0], 'torch', torch.__version__,
'cuda', torch.version.cuda, 'fairseq', fairseq.__version__)" >"$OUT/machine.txt" 2>"$OUT/import.log"
}
