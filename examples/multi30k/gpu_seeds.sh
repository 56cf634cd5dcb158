#!/usr/bin/env bash
# Issue 49's Multi30k runs on one GPU machine (Python 3.12, torch + CUDA, no fairseq, no network), all at once
# under CUDA MPS, from the repository root; progress and results go to the folder OUT names as they come.
#
#   examples/multi30k/gpu_seeds.sh pack      # here, first: the binarised corpus into .gpu/multi30k (copied along)
#   examples/multi30k/gpu_seeds.sh launch    # GPU command 1 (.gpu/ copied along): install, MPS, start every run, watch
#   examples/multi30k/gpu_seeds.sh collect   # GPU command 2, right after: wait for the runs (WAIT_S), collect
#   examples/multi30k/gpu_seeds.sh unpack DIR  # here, after: the runs' logs from DIR/logs.tgz into logs/
#
# The runs (RUNS; "PAIR SIDE SEED" each, ";" between): the DenseNMT and Weighted Transformer pairs, both
# sides, seeds 2 and 3 (at the rate seed 1's committed sweep chose), and the Weighted Transformer with fixed
# branch weights (variant model.fixed): seed 1 sweeps its three rates at once and converges; its seeds 2 and
# 3 start once seed 1's sweep has chosen (its chosen_lr file). Each run is `run.py side PAIR SIDE --seed N`
# started with setsid nohup (it outlives the call), one CPU thread, to early stopping, then evaluated; its
# checkpoints stay in BASE/work.
#
# Stages:
#   pack     run.py prepare (with PACK_PYTHON, default .venv/bin/python; only when MULTI30K_WORK, default
#            multi30k-work, has no data/bin), then copy data/bin, data/bpecodes, the
#            tokenised valid/test references and the raw ones into DATA (what the GPU machine needs)
#   launch   install (when fairseq does not import: the wheels of benchmarks/gpu_wheels.sh from .gpu/whl,
#            --no-compile, into SITE); copy the code into BASE/repo (once: later calls replace the working
#            tree, never the running code) and DATA into BASE/work and BASE/raw; start CUDA MPS; start each
#            run that is not running (a run started again resumes from its checkpoint_last.pt; a finished
#            one only rescores when its training changed); then watch as collect does, WATCH_S at most
#   collect  every 20 s until no run is alive or the wait is over: `run.py progress` (each run's epoch, best
#            loss, state, scores; its logs copied into BASE/repo/examples/multi30k/logs) -> OUT/progress.txt;
#            then OUT/logs.tgz (the runs' logs, eval.json, hypotheses) and OUT/runs.tgz (each run's output)
# Files back (8 at most): stages.log, machine.txt, install.log, progress.txt, logs.tgz, runs.tgz.
#
# Environment: OUT ($TMPDIR/m30k-out; TMPDIR: /tmp if unset), DEVICE (cuda; cpu for a dry run), PYTHON (python3),
# SITE ($TMPDIR/site), BASE ($TMPDIR/m30k: the machine's own copy of the code, work folder and run records; it lasts while the
# machine stays warm), DATA (.gpu/multi30k), RUNS (above), TRAIN_S (540; 0: no limit: every run's training
# stops cleanly TRAIN_S seconds after this launch began, fairseq's --stop-time-hours, and is evaluated; such a
# run is reported "no (time limit)" and not counted among the seeds; `launch` again continues it), WATCH_S
# (500), WAIT_S (collect: 150), MULTI30K_MAX_EPOCH (a lower epoch cap, for a dry run). The defaults fit a
# 15 minutes on the GPU machine: examples/multi30k/RESULTS.md, "Seeds on one GPU".
set -uo pipefail
MODE=${1:-}
TMP=${TMPDIR:-/tmp}
OUT=${OUT:-$TMP/m30k-out}
DEVICE=${DEVICE:-cuda}
PYTHON=${PYTHON:-python3}
SITE=${SITE:-$TMP/site}
BASE=${BASE:-$TMP/m30k}
DATA=${DATA:-.gpu/multi30k}
TRAIN_S=${TRAIN_S:-540}
WATCH_S=${WATCH_S:-500}
WAIT_S=${WAIT_S:-150}
RUNS=${RUNS:-"densenmt model 2; densenmt model 3; densenmt baseline 2; densenmt baseline 3;
weighted_transformer model 2; weighted_transformer model 3; weighted_transformer baseline 2;
weighted_transformer baseline 3; weighted_transformer model.fixed 1; weighted_transformer model.fixed 2;
weighted_transformer model.fixed 3"}
HERE=examples/multi30k
START=$(date +%s)

log() { echo "[$(($(date +%s) - START)) s] $*" | tee -a "$OUT/stages.log"; }
# shellcheck source=benchmarks/gpu_install.sh
source benchmarks/gpu_install.sh

runs() {  # one "PAIR SIDE SEED" a line
    echo "$RUNS" | tr ';' '\n' | awk 'NF == 3 {print $1, $2, $3}'
}

name_of() {  # SIDE SEED -> the run's folder name (run.run_name)
    if [ "$2" = 1 ]; then echo "$1"; else echo "$1.seed$2"; fi
}

alive() {  # PIDFILE: whether the process it names runs
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

pack() (  # a subshell: the first failing step ends it, DATA left as it was, nothing half-copied left
    set -e
    work=${MULTI30K_WORK:-multi30k-work} raw=${MULTI30K_RAW:-../shared/data/multi30k} tmp=$DATA.tmp
    if [ ! -d "$work/data/bin" ]; then
        "${PACK_PYTHON:-.venv/bin/python}" "$HERE/run.py" prepare
    fi
    rm -rf "$tmp" && trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/data/tok" "$tmp/raw"
    cp -r "$work/data/bin" "$tmp/data/bin"
    cp "$work/data/bpecodes" "$tmp/data/"
    cp "$work/data/tok/valid.de" "$work/data/tok/test.de" "$tmp/data/tok/"
    cp "$raw/valid.de" "$raw/test_2016_flickr.de" "$tmp/raw/"
    rm -rf "$DATA" && mv "$tmp" "$DATA"
    du -sh "$DATA" "$(dirname "$DATA")"
)

unpack() {  # the runs' logs, eval.json and hypotheses from a collect's logs.tgz into the committed logs
    tar -xzf "$1/logs.tgz" -C "$HERE/logs" || return 1
    tar -tzf "$1/logs.tgz" | { grep -c "eval.json$" || true; } | sed 's/$/ runs scored/'  # none scored yet: 0, not a failure
}

install() {
    INSTALL_S=120 gpu_install
}

setup() {  # the code, the corpus and MPS, once per machine
    if [ ! -d "$BASE/repo" ]; then
        mkdir -p "$BASE/repo.tmp"
        tar -c --exclude=./.git --exclude=./.gpu --exclude=./.venv --exclude=./multi30k-work . | tar -x -C "$BASE/repo.tmp"
        mv "$BASE/repo.tmp" "$BASE/repo"
    fi
    if [ ! -d "$BASE/work/data/bin" ]; then
        if [ ! -d "$DATA/data/bin" ]; then
            log "error: no corpus in $DATA (run \`$HERE/gpu_seeds.sh pack\` on the CPU machine, copy .gpu/ along)"
            exit 2
        fi
        mkdir -p "$BASE/work"
        rm -rf "$BASE/raw" && cp -r "$DATA/raw" "$BASE/raw"
        cp -r "$DATA/data" "$BASE/work/data.tmp" && mv "$BASE/work/data.tmp" "$BASE/work/data"
    fi
    mkdir -p "$BASE/runs"
    log "setup: code in $BASE/repo, corpus in $BASE/work/data ($(du -sh "$BASE/work/data" | cut -f1))"
    if [ "$DEVICE" = cuda ]; then
        nvidia-cuda-mps-control -d >>"$OUT/stages.log" 2>&1
        log "mps: nvidia-cuda-mps-control -d: exit $? (1: already running)"
    fi
}

launch_run() {  # PAIR SIDE SEED: start the run unless it is running
    local pair=$1 side=$2 seed=$3 name key body="" cmd runs chosen
    name=$(name_of "$side" "$seed")
    key="$pair.$name"
    runs=$(printf %q "$BASE/runs")  # the paths in the run's command line quoted for bash (BASE may hold spaces)
    if alive "$BASE/runs/$key.pid"; then
        log "launch: $pair/$name is running (pid $(cat "$BASE/runs/$key.pid"))"
        return
    fi
    cmd="$(printf '%q %q' "$PYTHON" "$BASE/repo/$HERE/run.py") side $pair $side --seed $seed --threads 1"
    if [ "$seed" = 1 ]; then
        cmd+=" --parallel-sweep"
    elif runs | grep -qx "$pair $side 1"; then  # seed 1 sweeps in this launch: wait for its choice
        chosen=$(printf %q "$BASE/work/$pair/$side/chosen_lr")
        body+="until [ -s $chosen ]; do kill -0 \$(cat $runs/$pair.$side.pid) 2>/dev/null || [ -s $chosen ] "
        body+="|| { echo 'seed 1 ended without choosing a rate'; exit 3; }; sleep 5; done; "
    fi
    if [ "$TRAIN_S" -gt 0 ]; then  # the same moment for every run, also for one that waited
        body+="left=\$(($STOP_AT - \$(date +%s))); "
        cmd+=" --train-hours \$(awk -v s=\$left 'BEGIN {printf \"%.4f\", (s < 60 ? 60 : s) / 3600}')"
    fi
    rm -f "$BASE/runs/$key.rc"
    setsid nohup bash -c "$body$cmd; echo \$? >$runs/$key.rc" >>"$BASE/runs/$key.out" 2>&1 </dev/null &
    echo $! >"$BASE/runs/$key.pid"
    log "launch: $pair/$name started (pid $!)"
}

progress() {  # each run's state -> OUT/progress.txt; true while a run is alive
    local any=1 pair side seed key state
    {
        date -u +"%H:%M:%S UTC, $(($(date +%s) - START)) s into this call"
        env MULTI30K_WORK="$BASE/work" "$PYTHON" "$BASE/repo/$HERE/run.py" progress \
            $(runs | awk '{print $1}' | sort -u) 2>&1 | grep -v "^done in"
        echo "processes:"
        while read -r pair side seed; do
            key="$pair.$(name_of "$side" "$seed")"
            if alive "$BASE/runs/$key.pid"; then
                state="running" && any=0
            elif [ -s "$BASE/runs/$key.rc" ]; then
                state="ended, exit $(cat "$BASE/runs/$key.rc")"
            else
                state="not started"
            fi
            echo "  $pair/$(name_of "$side" "$seed"): $state"
        done < <(runs)
        if [ "$DEVICE" = cuda ]; then
            nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
        fi
    } >"$OUT/progress.txt.tmp"
    mv "$OUT/progress.txt.tmp" "$OUT/progress.txt"
    return $any
}

watch() {  # SECONDS: until no run is alive or the time is over, then the logs and outputs into OUT
    local until=$(($(date +%s) + $1))
    while progress && [ "$(date +%s)" -lt "$until" ]; do
        sleep 20
    done
    progress
    local folders=() scored=() name
    while read -r pair side seed; do
        name="$pair/$(name_of "$side" "$seed")"
        [ -d "$BASE/repo/$HERE/logs/$name" ] && folders+=("$name")
        grep -q "^$name: .*test sacreBLEU" "$OUT/progress.txt" && scored+=("$name")
    done < <(runs)
    tar -czf "$OUT/logs.tgz" -C "$BASE/repo/$HERE/logs" "${folders[@]}"
    tar -czf "$OUT/runs.tgz" -C "$BASE/runs" .
    log "collect: ${#scored[@]} of $(runs | wc -l) runs scored, $(grep -c ": running$" "$OUT/progress.txt") running; \
OUT/logs.tgz holds ${#folders[@]} run folders"
}

case "$MODE" in
pack)
    pack
    ;;
unpack)
    unpack "${2:?unpack DIR: the folder holding logs.tgz}"
    ;;
launch | collect)
    mkdir -p "$OUT"
    export DEVICE MULTI30K_WORK="$BASE/work" MULTI30K_RAW="$BASE/raw" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
    export PYTHONPATH="$BASE/repo:$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
    log "$MODE: DEVICE=$DEVICE TRAIN_S=$TRAIN_S WATCH_S=$WATCH_S WAIT_S=$WAIT_S BASE=$BASE"
    if [ "$MODE" = launch ]; then
        install
        setup
        STOP_AT=$((START + TRAIN_S))
        while read -r pair side seed; do
            launch_run "$pair" "$side" "$seed"
        done < <(runs)
        watch "$WATCH_S"
    else
        watch "$WAIT_S"
    fi
    log "done"
    ;;
*)
    sed -n '2,9p' "$0"
    exit 2
    ;;
esac
