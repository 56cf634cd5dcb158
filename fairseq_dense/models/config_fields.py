"""Config fields every recurrent and convolutional family declares the same way.

``embedding_sharing`` (:mod:`.option_checks`) checks the sharing options these declare.
"""

from dataclasses import field


def share_all_embeddings_field():
    """``--share-all-embeddings``: one table for source, target and softmax."""
    return field(
        default=False,
        metadata={
            "help": "one embedding table for source, target and softmax: a joined dictionary, "
            "--encoder-embed-dim == --decoder-embed-dim, and as for "
            "--share-decoder-input-output-embed"
        },
    )


def tie_softmax_field(needs: str):
    """``--share-decoder-input-output-embed``: the softmax weight is the target embedding table."""
    return field(default=False, metadata={"help": f"tie the target embedding and the softmax (needs {needs})"})


def max_positions_field(side: str):
    """``--max-{side}-positions``: the longest sequence accepted, 1024 tokens by default."""
    return field(default=1024, metadata={"help": f"longest {side} accepted"})
