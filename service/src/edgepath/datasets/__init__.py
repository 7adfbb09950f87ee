"""Readers of public measurement data sets (training and evaluation only; never on the serving path)."""
