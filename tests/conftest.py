"""Shared test configuration: Hypothesis runs derandomized, so every run checks the same inputs."""

from hypothesis import settings

settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
settings.load_profile("deterministic")
