"""Data utilities: the synthetic corpus generator and the raw-text preparation pipeline."""
