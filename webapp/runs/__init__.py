"""Runs: submission, the run's stored results (metrics, population, lineage, evaluations, checkpoints), reads."""
