"""The Tatoeba German-English split that ships with the package (xz-compressed).

Source, licence (CC-BY 2.0 FR) and how the split was made: ``tatoeba-deu-eng/README.md`` and ``LICENSE`` beside this
file. :func:`extract` decompresses it into a folder of ``{train,valid,test}.{de,en}`` raw text, the layout
:mod:`fairseq_dense.data.prepare` reads.
"""

import itertools
import lzma
import os
from typing import Dict, Optional

from fairseq_dense.data.prepare import SPLITS, DataError, building

NAME = "tatoeba-deu-eng"
BUNDLED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), NAME)
SRC, TGT = "de", "en"
#: sentence pairs per split (README.md beside the files)
LINES: Dict[str, int] = {"train": 166438, "valid": 1672, "test": 852}


def extract(dest: str, max_lines: Optional[int] = None) -> str:
    """Decompress the first ``max_lines`` pairs (default: all) of each bundled split into ``dest`` (reused when it
    holds this extraction already); returns ``dest``. A missing bundled file is a :class:`DataError`."""
    stamp = os.path.join(dest, ".extracted")
    want = f"{NAME} max_lines={max_lines}\n"
    if os.path.isfile(stamp) and open(stamp, encoding="utf-8").read() == want:
        return dest
    with building(dest, ".extracted") as tmp:
        for split in SPLITS:
            for lang in (SRC, TGT):
                path = os.path.join(BUNDLED_DIR, f"{split}.{lang}.xz")
                if not os.path.isfile(path):
                    raise DataError(f"{path}: bundled corpus file not found (reinstall fairseq-dense)")
                # bytes, split at b"\n" only: the files decompress verbatim
                with lzma.open(path, "rb") as inp, open(os.path.join(tmp, f"{split}.{lang}"), "wb") as out:
                    out.writelines(itertools.islice(inp, max_lines))
        with open(os.path.join(tmp, ".extracted"), "w", encoding="utf-8") as f:
            f.write(want)
    return dest
