"""What names `python -m workflows study-real-model`'s studies: the header of their commands.sh and the folder
their commands run in. Below the command's options (`command`) and its work (`study`), which both read them."""

from __future__ import annotations

from pathlib import Path

COMMAND = "python -m workflows study-real-model"
#: The header of OUT/commands.sh (names this command), and that of the studies of scripts/study_real_model.py.
DESCRIPTIONS = (f"Commands of {COMMAND}, in order.", "Commands of scripts/study_real_model.py, in order.")
ROOT = Path(__file__).resolve().parents[2]
