#!/usr/bin/env bash
# Run `python -m MODULE ARGS...` in one process, or under torchrun when NPROC_PER_NODE > 1 or NNODES > 1.
# Used by scripts/run_search.sh and scripts/run_evaluation.sh (their headers list the environment).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
NPROC_PER_NODE=${NPROC_PER_NODE:-1}
NNODES=${NNODES:-1}
if [ "$NPROC_PER_NODE" -le 1 ] && [ "$NNODES" -le 1 ]; then
  exec "$PYTHON" -m "$@"
fi
exec "$PYTHON" -m torch.distributed.run \
  --nnodes="$NNODES" --node_rank="${NODE_RANK:-0}" --nproc_per_node="$NPROC_PER_NODE" \
  --master_addr="${MASTER_ADDR:-127.0.0.1}" --master_port="${MASTER_PORT:-29500}" \
  -m "$@"
