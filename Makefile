# Two commands set up and run everything:
#   make quickstart   train + evaluate a small model on real data (the Tatoeba De-En split bundled
#                     in fairseq_dense/data/tatoeba-deu-eng) for UPDATES updates (default 1600: the
#                     same updates on any machine; BLEU within 0.6 across CPUs and thread counts,
#                     docs/quickstart.md); MINUTES=N trains for N minutes instead; BASELINE=1
#                     also trains fairseq's built-in of the same size and prints both; ALL_FAMILIES=1
#                     every family in turn, one table; CORPUS=DIR SRC=.. TGT=.. for any other corpus,
#                     CORPUS=synthetic for a made-up pair; MAX_LINES=N keeps N pairs of each bundled
#                     split (a quick try); FRESH=1 trains again (else a finished run is reported);
#                     SEEDS=N trains each model with N seeds (mean +- sd); ARCH="A B" other models;
#                     THREADS=N CPU threads per fairseq command (default: what the load leaves idle)
#   make test         run the whole test suite
#   make lint         ruff check (pyflakes, pycodestyle, import order) + ruff format --check (ruff.toml)
# Both create (or reuse) the local virtual environment .venv.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat setup.py | cksum | cut -d' ' -f1)
CORPUS ?= tatoeba
SRC ?= de
TGT ?= en
UPDATES ?= 1600
# opt-in time budget (minutes per model) instead of UPDATES
MINUTES ?=
MAX_LINES ?=
FRESH ?=
BASELINE ?=
ALL_FAMILIES ?=
SEEDS ?=
ARCH ?=
THREADS ?=
PYTEST_ARGS ?=
# test processes (pytest-xdist); the tests mostly run single-threaded fairseq commands
TEST_WORKERS ?= 2

.PHONY: venv quickstart test lint clean

venv: $(STAMP)

$(STAMP): setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# CPU torch first (from local disk), then build fairseq without isolation so
	# pip never fetches a CUDA torch into a build environment.
	$(PY) -m pip install -q torch==2.13.0 setuptools wheel cython numpy
	$(PY) -m pip install --no-build-isolation -e ".[test]"
	touch $(STAMP)

quickstart: venv
	$(PY) -m fairseq_dense.cli.quickstart $(if $(CORPUS),--corpus $(CORPUS)) \
		$(if $(filter synthetic,$(CORPUS)),,--src $(SRC) --tgt $(TGT)) \
		$(if $(MINUTES),--minutes $(MINUTES),--updates $(UPDATES)) $(if $(MAX_LINES),--max-lines $(MAX_LINES)) \
		$(if $(BASELINE),--baseline) $(if $(ALL_FAMILIES),--all-families) $(if $(FRESH),--fresh) \
		$(if $(SEEDS),--seeds $(SEEDS)) $(if $(ARCH),--arch $(ARCH)) $(if $(THREADS),--threads $(THREADS))

test: venv
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) quickstart-work
