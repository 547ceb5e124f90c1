"""Evaluation harness: long-context tasks with the relevant item at each position, calibrators, statistics, reports."""
