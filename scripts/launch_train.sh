#!/usr/bin/env bash
# Launch `python -m repo_train fit` with torchrun on one or more nodes.
#
#   scripts/launch_train.sh CONFIG [extra LightningCLI args...]
#
# Environment (defaults = one node with every visible GPU):
#   NNODES          number of nodes                       (1)
#   NODE_RANK       this node's rank                       (0)
#   NPROC_PER_NODE  processes (GPUs) per node              (nvidia-smi count, else 1)
#   MASTER_ADDR     address of node 0                      (127.0.0.1)
#   MASTER_PORT     port on node 0                         (29500)
# The config's trainer.devices / trainer.num_nodes are overridden to match, so the
# gradient accumulation (computed from the global batch) stays right.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${1:?usage: scripts/launch_train.sh CONFIG [args...]}
shift
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
if [ -z "${NPROC_PER_NODE:-}" ]; then
  NPROC_PER_NODE=$(nvidia-smi --list-gpus 2>/dev/null | wc -l || true)
  [ "${NPROC_PER_NODE:-0}" -ge 1 ] || NPROC_PER_NODE=1
fi
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
MASTER_PORT=${MASTER_PORT:-29500}
PYTHON=${PYTHON:-.venv/bin/python}

exec "$PYTHON" -m torch.distributed.run \
  --nnodes="$NNODES" --node_rank="$NODE_RANK" --nproc_per_node="$NPROC_PER_NODE" \
  --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" \
  -m repo_train fit --config "$CONFIG" \
  --trainer.devices "$NPROC_PER_NODE" --trainer.num_nodes "$NNODES" "$@"
