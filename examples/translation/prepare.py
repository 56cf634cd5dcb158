#!/usr/bin/env python
"""Prepare a raw parallel corpus for fairseq: sacremoses -> joint BPE -> fairseq-preprocess.

    python examples/translation/prepare.py --raw ../shared/data/tatoeba-deu-eng \
        --src de --tgt en --dest data/tatoeba-deu-eng --bpe-merges 10000 [--lowercase]

See ``fairseq_dense/data/prepare.py`` for what is written where.
"""

from fairseq_dense.data.prepare import main

if __name__ == "__main__":
    main()
