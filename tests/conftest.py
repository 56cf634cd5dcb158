import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end tests through the fairseq CLI")


@pytest.fixture(scope="session")
def shared(tmp_path_factory):
    """Corpora and training runs built once for the whole test run, by whichever worker asks first
    (``tests.reliability_helpers.Shared``); pytest-xdist's workers have their folders in one parent."""
    from tests.reliability_helpers import Shared

    base = tmp_path_factory.getbasetemp()
    return Shared((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared")


@pytest.fixture(scope="module")
def proxy_setup(tmp_path_factory):
    """``(dict_dir, sample)`` for ``benchmarks.proxies.measure_side``: a 100-entry vocabulary, a 96-token batch."""
    from benchmarks import synthetic

    vocab = 100
    dict_dir = synthetic.write_dicts(str(tmp_path_factory.mktemp("dicts")), vocab)
    return dict_dir, synthetic.make_batch(synthetic.batch_lengths(96, 20), vocab)


# ---------------------------------------------------------------- the hostile-input hub tests (tests/test_hub_*.py)


@pytest.fixture(scope="module")
def gru(tmp_path_factory):
    """The untrained ``gru_attention_tiny`` export (built once per session, see tests/hub_hostile_helpers.py)."""
    from tests.hub_hostile_helpers import GRU, exported

    return exported(tmp_path_factory, GRU)


@pytest.fixture(scope="module")
def transformer(tmp_path_factory):
    """The untrained ``weighted_transformer_tiny`` export (built once per session)."""
    from tests.hub_hostile_helpers import TRANSFORMER, exported

    return exported(tmp_path_factory, TRANSFORMER)


@pytest.fixture
def marker(tmp_path):
    """The file a payload creates if it runs; it must never exist."""
    return tmp_path / "MARKER"


@pytest.fixture
def tripwire(marker, monkeypatch):
    """torch.load and pickle create the marker (and fail) if the loading path calls them at all."""
    import pickle

    import torch

    def trip(*args, **kwargs):
        marker.touch()
        raise AssertionError("the loading path unpickled")

    for target, name in ((torch, "load"), (pickle, "load"), (pickle, "loads"), (pickle, "Unpickler")):
        monkeypatch.setattr(target, name, trip)
