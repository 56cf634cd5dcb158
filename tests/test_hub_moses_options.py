"""``fairseq-dense-export --moses-no-escape --moses-no-dash-splits``: an export tokenizes as its data was.

Data prepared by ``fairseq_dense.data.prepare`` (the quick-start's) is tokenized without
escaping and without aggressive dash splits; an export of a model trained on it has to
tell fairseq's Moses tokenizer the same, or apostrophes become ``&apos;`` and hyphens
``@-@``: text the model never saw. The shared tiny GRU export is described in
``tests/hub_hostile_helpers.py``.
"""

import json
import os

import pytest

from fairseq_dense import hub
from fairseq_dense.cli import export as export_cli

TEXT = 'Wie geht\'s? Eine E-Mail an "Tom".'


def export(gru, out, *flags) -> int:
    return export_cli.main([str(gru.ckpt), "--out", str(out), "--data", str(gru.data), *flags])


def test_moses_options_are_recorded_and_applied(gru, tmp_path):
    assert export(gru, tmp_path / "as-prepared", "--moses-no-escape", "--moses-no-dash-splits") == 0
    config = json.loads((tmp_path / "as-prepared" / "config.json").read_text())
    assert config["tokenizer"] == {
        "_name": "moses",
        "source_lang": "src",
        "target_lang": "tgt",
        "moses_no_escape": True,
        "moses_no_dash_splits": True,
    }
    card = (tmp_path / "as-prepared" / "README.md").read_text()
    assert "tokenizer: moses (moses_no_dash_splits, moses_no_escape)" in card

    as_prepared = hub.from_pretrained(tmp_path / "as-prepared").tokenizer.encode(TEXT)
    assert as_prepared == 'Wie geht \' s ? Eine E-Mail an " Tom " .'
    # without the options (the default, for data tokenized by fairseq's own defaults) fairseq escapes and splits
    assert export(gru, tmp_path / "default") == 0
    assert "moses_no_escape" not in json.loads((tmp_path / "default" / "config.json").read_text())["tokenizer"]
    default = hub.from_pretrained(tmp_path / "default").tokenizer.encode(TEXT)
    assert "&apos;" in default and "@-@" in default and "&quot;" in default


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--moses-no-dash-splits"], "--moses-no-dash-splits"),
        (["--moses-source-lang", "de", "--moses-target-lang", "en"], "--moses-source-lang, --moses-target-lang"),
    ],
)
def test_moses_options_without_moses_are_refused(gru, tmp_path, capsys, flags, named):
    assert export(gru, tmp_path / "out", "--tokenizer", "none", *flags) == 1
    err = capsys.readouterr().err
    assert f"{named}: Moses options need --tokenizer moses" in err and len(err.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == []  # nothing half-written
