#!/usr/bin/env bash
# Run an LPES search: `python -m search run ...` on one process, or under torchrun on several.
#
#   scripts/run_search.sh --model DIR --config configs/search/lpes.yaml --out scales/NAME.json [--resume] ...
#   NPROC_PER_NODE=4 scripts/run_search.sh --model DIR --config ... --out ...   # 4 GPUs (or CPU processes)
#
# Environment (defaults = one process):
#   NPROC_PER_NODE  processes on this node; > 1 launches torchrun (ranks split the prompts)   (1)
#   NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT   multi-node torchrun (1, 0, 127.0.0.1, 29500);
#                   --resume then needs NAME.state.json on a filesystem every node can read
#   PYTHON          interpreter                                                             (.venv/bin/python)
# Every argument is passed to `python -m search run` (see `python -m search run --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
NPROC_PER_NODE=${NPROC_PER_NODE:-1}
NNODES=${NNODES:-1}
if [ "$NPROC_PER_NODE" -le 1 ] && [ "$NNODES" -le 1 ]; then
  exec "$PYTHON" -m search run "$@"
fi
exec "$PYTHON" -m torch.distributed.run \
  --nnodes="$NNODES" --node_rank="${NODE_RANK:-0}" --nproc_per_node="$NPROC_PER_NODE" \
  --master_addr="${MASTER_ADDR:-127.0.0.1}" --master_port="${MASTER_PORT:-29500}" \
  -m search run "$@"
