"""Helpers the tests share: tolerances, small harness configs, paths into the repository."""
