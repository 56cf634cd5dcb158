# Two commands set up and run everything:
#   make quickstart   train + evaluate a small model on real data (Tatoeba De-En from
#                     ../shared/data when it is there, else a built-in synthetic pair;
#                     CORPUS=DIR SRC=.. TGT=.. for any other corpus, CORPUS= for the synthetic one)
#   make test         run the whole test suite
#   make lint         ruff check (pyflakes, pycodestyle, import order) + ruff format --check (ruff.toml)
# Both create (or reuse) the local virtual environment .venv.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat setup.py | cksum | cut -d' ' -f1)
TATOEBA := ../shared/data/tatoeba-deu-eng
CORPUS ?= $(if $(wildcard $(TATOEBA)/train.de),$(TATOEBA),)
SRC ?= de
TGT ?= en
MINUTES ?= 6
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
	@echo "quick-start corpus: $(if $(CORPUS),$(CORPUS) ($(SRC) -> $(TGT)),built-in synthetic pair (no $(TATOEBA) here))"
	$(PY) -m fairseq_dense.cli.quickstart $(if $(CORPUS),--corpus $(CORPUS) --src $(SRC) --tgt $(TGT)) --minutes $(MINUTES)

test: venv
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) quickstart-work
