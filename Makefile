# Two commands set up and run everything:
#   make quickstart   train + evaluate a small model (synthetic data; CORPUS=DIR for real data)
#   make test         run the whole test suite
# Both create (or reuse) the local virtual environment .venv.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat setup.py | cksum | cut -d' ' -f1)
CORPUS ?=
SRC ?= de
TGT ?= en
MINUTES ?= 6
PYTEST_ARGS ?=
# test processes (pytest-xdist); the tests mostly run single-threaded fairseq commands
TEST_WORKERS ?= 2

.PHONY: venv quickstart test clean

venv: $(STAMP)

$(STAMP): setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# CPU torch first (from local disk), then build fairseq without isolation so
	# pip never fetches a CUDA torch into a build environment.
	$(PY) -m pip install -q torch==2.13.0 setuptools wheel cython numpy
	$(PY) -m pip install --no-build-isolation -e ".[test]"
	touch $(STAMP)

quickstart: venv
	$(PY) -m fairseq_dense.cli.quickstart $(if $(CORPUS),--corpus $(CORPUS) --src $(SRC) --tgt $(TGT)) --minutes $(MINUTES)

test: venv
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) quickstart-work
