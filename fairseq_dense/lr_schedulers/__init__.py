"""LR schedulers registered by fairseq-dense."""
