"""`check-gpu`: one command that says whether the GPU paths work (scripts/check_gpu.py, `python -m workflows check-gpu`).

Each check is a function of a `device` that returns table rows
(`gpu_check.rows`): the position methods (`positions`), the harness's
decoding (`harness_tokens`), Lightning + DeepSpeed training (`training_run`)
and the throughput of a 1B-shaped step (`throughput`). `options` declares the
command's options, `command` checks for CUDA and prints the table, `groups`
runs the checks; the tests run the cheap ones with device="cpu".
"""
