#!/usr/bin/env bash
# Run an LPES search: `python -m search run ...` on one process, or under torchrun on several.
#
#   scripts/run_search.sh --model.path DIR --config configs/search/lpes.yaml --out scales/NAME.json [--resume] ...
#   NPROC_PER_NODE=4 scripts/run_search.sh --model.path DIR --config ... --out ...   # 4 GPUs (or CPU processes)
#
# Environment (defaults = one process):
#   NPROC_PER_NODE  processes on this node; > 1 launches torchrun (ranks split the prompts)   (1)
#   NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT   multi-node torchrun (1, 0, 127.0.0.1, 29500);
#                   --resume then needs NAME.state.json on a filesystem every node can read
#   PYTHON          interpreter                                                             (.venv/bin/python)
# Every argument is passed to `python -m search run` (see `python -m search run --help`).
exec "$(dirname "$0")/torchrun_module.sh" search run "$@"
