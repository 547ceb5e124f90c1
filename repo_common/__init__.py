"""Project-wide infrastructure with no ML in it, shared by training, evaluation and the search.

Atomic writes (`atomic`), the output rule (`output_guard`), run locks (`run_lock`), progress lines and
bars (`progress`), rank-0 and sharding helpers (`distributed`), the end of a torchrun worker with its launcher
(`launcher_watch`), the one config parser (`config_cli`) and one-line CLI errors (`cli_errors`). It imports no
other project package (tests/test_layering.py).
"""
