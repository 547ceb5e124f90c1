#!/usr/bin/env bash
# Run an evaluation: `python -m evaluation run ...` on one process, or under torchrun on several.
#
#   scripts/run_evaluation.sh --model DIR --tasks mdqa --methods baseline --methods pcd --out results/NAME
#   NPROC_PER_NODE=8 scripts/run_evaluation.sh --model DIR --config run.yaml --out results/NAME   # 8 GPUs
#
# Environment (defaults = one process):
#   NPROC_PER_NODE  processes on this node; > 1 launches torchrun (ranks share the batches)   (1)
#   NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT   multi-node torchrun (1, 0, 127.0.0.1, 29500);
#                   --out must be on a filesystem every node can read and write
#   PYTHON          interpreter                                                             (.venv/bin/python)
# Every argument is passed to `python -m evaluation run` (see `python -m evaluation run --help`).
exec "$(dirname "$0")/torchrun_module.sh" evaluation run "$@"
