#!/usr/bin/env bash
# Nsight Compute over bench/profile_step.py on the H200, in one device call: every kernel that one call of each
# listed workload launches, with its GPU time, for the built stable-ABI variant and the anchors asked for. Output:
# $OUT/profile_<op>_<rows>_<mode>.csv, one per workload.
#
#   OUT=... bench/profile_h200.sh DIST [WHEELS_DIR]
# env: PROFILES (default "mlp:16:infer:--cublaslt mlp:4096:infer:--cublaslt act_and_mul:8192:infer:--compile"), each
# op:rows:mode[:extra profile_step flags, comma-separated]; T_PROFILE per workload (default 90 s).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIST="$(cd "${1:?usage: bench/profile_h200.sh DIST [WHEELS_DIR]}" && pwd)"
WHEELS="${2:-$ROOT/.whl}"
OUT="${OUT:-$PWD/profile-out}"
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site "$WHEELS"/*.whl || exit 1
export PYTHONPATH="/tmp/site:$ROOT" PYTHONUNBUFFERED=1
CUDA_DIR="$DIST/build/torch-stable-abi211-cu130-x86_64-linux"
for spec in ${PROFILES:-mlp:16:infer:--cublaslt mlp:4096:infer:--cublaslt act_and_mul:8192:infer:--compile}; do
  IFS=: read -r op rows mode extra <<< "$spec"
  timeout "${T_PROFILE:-90}" ncu --profile-from-start off --cache-control none --clock-control none \
    --metrics gpu__time_duration.sum --csv python3 "$ROOT/bench/profile_step.py" --variant-dir "$CUDA_DIR=stable-abi" \
    --op "$op" --rows "$rows" --mode "$mode" ${extra//,/ } > "$OUT/profile_${op}_${rows}_${mode}.csv" 2>&1
  echo "$spec: rc=$?"
done
