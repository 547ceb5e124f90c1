#!/usr/bin/env bash
# Set up .venv with this project installed. Idempotent: a second run with
# unchanged setup.cfg does nothing but check.
#
# torch goes in first, so that no dependency pulls a multi-GB CUDA build on a
# CPU machine: an existing torch is kept; otherwise on a machine without
# nvidia-smi the CPU wheel torch==2.13.0 is taken from a local wheel that pip
# can find without an index (find-links), else from PyTorch's CPU index.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"

if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "[setup] CUDA machine: installing torch==$TORCH_VERSION from PyPI"
    $PIP install "torch==$TORCH_VERSION"
  else
    # A CPU wheel pip can see without an index (find-links, e.g. a wheel cache on disk)?
    WHEELS=$(mktemp -d)
    if $PIP download --quiet --no-deps --no-index "torch==$TORCH_VERSION" -d "$WHEELS" 2>/dev/null \
        && ls "$WHEELS"/torch-*+cpu-*.whl >/dev/null 2>&1; then
      echo "[setup] no CUDA: installing the local CPU wheel $(basename "$WHEELS"/torch-*.whl)"
      $PIP install "$WHEELS"/torch-*+cpu-*.whl
    else
      echo "[setup] no CUDA: installing the CPU build of torch==$TORCH_VERSION from PyTorch's CPU index"
      $PIP install "torch==$TORCH_VERSION" --index-url https://download.pytorch.org/whl/cpu
    fi
    rm -rf "$WHEELS"
  fi
fi

STAMP="$VENV/.repo-train-installed"
WANT=$(cat setup.cfg pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ] || ! "$VENV/bin/python" -c "import repo_train" 2>/dev/null; then
  echo "[setup] installing repo-train and its dependencies"
  $PIP install -e ".[dev]"
  echo "$WANT" > "$STAMP"
else
  echo "[setup] up to date ($VENV)"
fi
"$VENV/bin/python" -c "import torch, transformers; print('[setup] torch', torch.__version__, '| transformers', transformers.__version__, '| cuda', torch.cuda.is_available())"
