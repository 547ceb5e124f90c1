"""The quickstart, `python -m workflows quickstart`: the whole loop (train, search, calibrate, evaluate, report).

`options` (the command line and the loop file's checks), `command` (what runs, under the output's lock),
`tiny_loop` (the built-in default on the shipped tiny models), `loop_file` (the same loop at full scale from a
loop file), `report` (OUT/README.md), `resume` (how an interrupted step goes on), `repo_positions` (REPO's
learned positions on one prompt).
"""
