"""Evaluation harness: long-context tasks with the answer at every position (issue 4; in progress)."""
