"""Command-line entry points of fairseq-dense."""
