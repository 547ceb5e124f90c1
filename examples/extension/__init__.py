"""A user's own extensions, written outside the project's packages (docs/configuring.md, "Your own code").

Each file is one extension plus one registration line; `tests/test_extension_from_outside.py` runs each
through its command with `--import examples.extension.<file>`:

- `colour_task.py`: a task (`--tasks colour_lookup`, or its class_path in a config);
- `clamp_calibrator.py`: a training-free calibrator (`--methods clamp:limit=8`);
- `head_scale_policy.py`: a trainable position policy with two options and a schedule (`fit`).
"""
