"""Run one command as `python -m PACKAGE ...` or `python SCRIPT ...` would, then report what it loaded.

    python tests/startup_probe.py torch,transformers -m evaluation report --help
    python tests/startup_probe.py torch scripts/make_tiny_dip_base.py --help

The last line of stdout is JSON: the command's exit code and which of the named top-level packages are in
`sys.modules` once it has answered (tests/test_startup.py).
"""

from __future__ import annotations

import json
import os
import runpy
import sys


def main() -> None:
    heavy, target = sys.argv[1].split(","), sys.argv[2:]
    if target[0] == "-m":
        module, args = target[1], target[2:]
        sys.argv = [module, *args]
        sys.path.insert(0, os.getcwd())
        run = lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script, args = target[0], target[1:]
        sys.argv = [script, *args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
        run = lambda: runpy.run_path(script, run_name="__main__")
    code = 0
    try:
        run()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    sys.stdout.flush()
    print("\n" + json.dumps({"code": code, "heavy": sorted(name for name in heavy if name in sys.modules)}))


if __name__ == "__main__":
    main()
