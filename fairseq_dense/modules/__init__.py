"""Reusable modules shared by the model families."""
