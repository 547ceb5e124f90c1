"""What names `python -m workflows reproduce-reversal`'s runs: the header of their commands.sh and the folder their
commands run in. Below the command's options (`options`) and its work (`reproduction`), which both read them."""

from __future__ import annotations

from pathlib import Path

COMMAND = "python -m workflows reproduce-reversal"
#: The header of OUT/commands.sh (names this command), and that of the runs of scripts/reproduce_reversal.py.
DESCRIPTIONS = (f"The commands {COMMAND} ran, in order.", "The commands scripts/reproduce_reversal.py ran, in order.")
ROOT = Path(__file__).resolve().parents[2]
