#!/usr/bin/env bash
# The benchmark run on any GPU box: given a dist (`kernel-hub build --arch sm_90a --out dist/fused-mlp`), start a
# hub on 127.0.0.1, publish the build twice (acme/fused-mlp: every variant, so get_kernel picks the stable-ABI CUDA
# one; acme/fused-mlp-triton: the Triton torch-cuda variant alone), load both with registry.get_kernel, run the
# GPU tests, then the benchmarks against what get_kernel returned, and print the tables and goals last.
#
#   bench/run_gpu.sh DIST [WHEELS_DIR]
#
# Stages (STAGES, in order; default "tests check host ops model loader"): tests (tests/cuda on the built variant,
# tests/kernels on Triton), check (tests/cuda/check_paths.py: a failing path is switched off for later stages),
# host (host_cost.py), paths (bench_paths.py, the path table's numbers; PATHS_STEPS=chain,... for some steps),
# ops (bench_ops.py over OPS_PRESETS at OPS_ROWS, fwd+bwd at OPS_TRAIN_ROWS, OPS_DTYPES; OPS_MAX_AUTOTUNE: case
# prefixes also compiled with max-autotune), model (bench_model.py, MODEL_ROWS), loader (bench_loader.py: get_kernel
# cold/warm/pinned and `kernel-hub bench`, on a repo of its own since its speed record reorders the variants), ab
# (candidate builds AB_DISTS against DIST: their tests/cuda, then the path table of AB_STEPS, AB_ROUNDS rounds),
# hfmodel (needs transformers: the GPU tests of tests/loader/test_transformers_models.py, then bench_hf_model.py:
# Llama-shaped models kernelized through kernels from acme/fused-mlp beside eager, compile and Liger; HF_ARGS).
# Each stage has a time limit (T_<STAGE>, seconds) and writes its JSON as it goes, so the summary always prints;
# the whole preset suite takes several runs of the ops stage (OPS_PRESETS, a few presets each).
# Env: OUT (default ./bench-out: each stage's JSON and log, summary.md); BENCH_CSV (where every number is also
# appended; default bench/benchmark_data.csv); QUICK=1 (no torch.compile, fewer rows: a first look in ~2 min);
# HUB=0 (import the variant dirs of DIST directly instead of publishing to a hub).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIST="$(cd "${1:?usage: bench/run_gpu.sh DIST [WHEELS_DIR]}" && pwd)"
WHEELS="${2:-}"
OUT="${OUT:-$PWD/bench-out}" QUICK="${QUICK:-0}" STAGES="${STAGES:-tests check host ops model loader}"
T_TESTS="${T_TESTS:-120}" T_CHECK="${T_CHECK:-40}" T_HOST="${T_HOST:-40}" T_PATHS="${T_PATHS:-150}"
T_OPS="${T_OPS:-200}" T_MODEL="${T_MODEL:-230}" T_LOADER="${T_LOADER:-100}" T_HFTESTS="${T_HFTESTS:-180}"
T_HFMODEL="${T_HFMODEL:-240}"
OPS_PRESETS="${OPS_PRESETS:-llama-3-8b,geglu-768-3072,mlp-3x1024}" OPS_ROWS="${OPS_ROWS:-1,16,4096}"
OPS_TRAIN_ROWS="${OPS_TRAIN_ROWS:-4096}" OPS_DTYPES="${OPS_DTYPES:-bf16}" MODEL_ROWS="${MODEL_ROWS:-16,1024}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/driver.log") 2>&1
log() { echo "[run_gpu +${SECONDS}s] $*"; }
cd "$ROOT"

if [ -n "$WHEELS" ]; then
  log "installing wheels from $WHEELS"
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site "$WHEELS"/*.whl \
    || { log "wheel install failed"; exit 1; }
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader || true
WORK="$(mktemp -d)"
CUDA_VARIANT=$(python3 -c 'import tomllib; m = tomllib.load(open("build/matrix.toml", "rb"))
print(next(name for name, v in m["variants"].items() if v.get("kind") == "cuda"))')  # the matrix names it
CUDA_DIR="$DIST/build/$CUDA_VARIANT"
hub() { python3 -m registry.cli "$@"; }

start_hub_and_publish() {  # sets URL, HF_ENDPOINT, HF_TOKEN
  export HF_HOME="$WORK/hf" KERNELS_CACHE="$WORK/kernels-cache" HF_HUB_DISABLE_PROGRESS_BARS=1
  unset HF_HUB_DISABLE_TELEMETRY  # kernels 0.17.2 breaks with it set (hub-protocol.md §9.1)
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  URL="http://127.0.0.1:$port"
  python3 -m registry.cli serve --host 127.0.0.1 --port "$port" --data "$WORK/hub" > "$WORK/hub.log" 2>&1 &
  HUB_PID=$!
  trap 'kill $HUB_PID 2>/dev/null' EXIT
  python3 -c 'import sys, time, urllib.request as u
for _ in range(300):
    try: sys.exit(u.urlopen(sys.argv[1] + "/api/agent-harnesses", timeout=1).close())
    except OSError: time.sleep(0.1)
sys.exit(1)' "$URL" || { log "hub did not start"; return 1; }
  export HF_ENDPOINT="$URL"
  HF_TOKEN="$(hub token create --user bench --write acme --data "$WORK/hub")" || return 1
  export HF_TOKEN
  hub org create acme --trusted --member bench --data "$WORK/hub" > /dev/null || return 1
  log "hub on $URL; publishing $DIST"
  publish acme/fused-mlp "$DIST" || return 1
  mkdir -p "$WORK/triton-dist/build"
  for v in torch-cuda torch-cpu torch-universal; do cp -r "$DIST/build/$v" "$WORK/triton-dist/build/"; done
  publish acme/fused-mlp-triton "$WORK/triton-dist"
}
publish() { hub publish "$1" "$2" --version 1 --endpoint "$URL" --token "$HF_TOKEN" --key "$WORK/key.pem" > /dev/null; }

LOAD=(--variant-dir "$CUDA_DIR=stable-abi" --variant-dir "$DIST/build/torch-cuda=torch-cuda")
if [ "${HUB:-1}" != 0 ]; then
  if start_hub_and_publish; then
    LOAD=(--hub "$URL" --repo "acme/fused-mlp=stable-abi" --repo "acme/fused-mlp-triton=torch-cuda")
  else  # the benchmarks still run, on the variant dirs; the summary's kernel lines say which source
    log "hub/publish FAILED; loading the variant dirs directly instead"
    unset URL
    tail -20 "$WORK/hub.log"
  fi
fi

cuda_tests() {  # VARIANT_DIR LIMIT_S LOG: tests/cuda against one built stable-ABI variant dir
  FUSED_MLP_VARIANT_DIR="$1" timeout "$2" python3 -m pytest -m gpu -q -p no:cacheprovider tests/cuda > "$3" 2>&1
  echo "tests/cuda on $1 exit $?" >> "$3"
}
run() {  # LIMIT_S NAME SCRIPT ARGS...: one benchmark script, its failure logged, never fatal
  local limit=$1 name=$2
  shift 2
  timeout "$limit" python3 "$@" || log "$name failed or timed out"
}
stage_tests() {  # the two suites check numbers, not speed: they share the GPU at once
  cuda_tests "$CUDA_DIR" "$T_TESTS" "$WORK/tests-cuda.log" &
  local pid=$!
  if [ "$QUICK" != 1 ]; then
    timeout "${T_TESTS_TRITON:-$T_TESTS}" python3 -m pytest -m gpu -q -p no:cacheprovider tests/kernels \
      tests/loader/test_kernelize.py tests/matrix/test_matrix_check.py > "$WORK/tests-kernels.log" 2>&1
    echo "tests/kernels+kernelize+matrix-check exit $?" >> "$WORK/tests-kernels.log"
  fi
  wait "$pid"
  cat "$WORK"/tests-*.log >> "$OUT/tests.log"
  grep -E "passed|failed|error|exit" "$OUT/tests.log" | tail -8
}
stage_check() {
  local line
  line=$(timeout "$T_CHECK" python3 tests/cuda/check_paths.py --variant-dir "$CUDA_DIR" | tee /dev/stderr | tail -1)
  case "$line" in
    FUSED_MLP_CUDA_DISABLE=?*) export "${line?}"; log "switched off for the later stages: $line" ;;
    FUSED_MLP_CUDA_DISABLE=) ;;
    *) log "check_paths gave no verdict; nothing switched off" ;;
  esac
}
stage_host() { run "$T_HOST" host bench/host_cost.py "${LOAD[@]}" --json "$OUT/host.json"; }
stage_paths() {
  run "$T_PATHS" paths bench/bench_paths.py "${LOAD[@]}" --json "$OUT/paths.json" \
    --steps "${PATHS_STEPS:-linear,gate_up,act_and_mul,chain}"
}
stage_ops() {
  local args=(--presets "$OPS_PRESETS" --rows "$OPS_ROWS" --train-rows "$OPS_TRAIN_ROWS" --dtypes "$OPS_DTYPES")
  [ -n "${OPS_MAX_AUTOTUNE:-}" ] && args+=(--max-autotune "$OPS_MAX_AUTOTUNE")
  [ "$QUICK" = 1 ] && args+=(--skip compile)
  run "$T_OPS" ops bench/bench_ops.py "${LOAD[@]}" "${args[@]}" --json "$OUT/ops.json"
}
stage_model() {
  local args=(--rows "$MODEL_ROWS" ${MODEL_ARGS:-})  # e.g. MODEL_ARGS="--models llama-3.2-1b --layers 16"
  [ "$QUICK" = 1 ] && args=(--rows 16,1024 --modes infer --no-compile)
  run "$T_MODEL" model bench/bench_model.py "${LOAD[@]}" "${args[@]}" --json "$OUT/model.json"
}
stage_loader() {
  if [ -z "${URL:-}" ]; then log "loader stage skipped: it needs the hub"; return; fi
  # Bytecode as an installed package has it: without it every fresh process recompiles kernel-hub's modules.
  python3 -m compileall -q "$ROOT/registry" > /dev/null 2>&1 || true
  publish acme/fused-mlp-loader "$DIST" || { log "loader: publish failed"; return; }
  run "$T_LOADER" loader bench/bench_loader.py --repo acme/fused-mlp-loader --out "$OUT/loader.json"
}
stage_ab() {  # ab_tests_LABEL.log, ab_paths_LABEL_ROUND.json; one process per build (bench_paths loads one)
  local d round label dir
  [ -n "${AB_DISTS:-}" ] || { log "stage ab needs AB_DISTS"; return; }
  for d in $AB_DISTS; do
    [ "${AB_TESTS:-1}" != 0 ] && cuda_tests "$d/build/$CUDA_VARIANT" "${T_AB_TESTS:-110}" "$OUT/ab_tests_$(basename "$d").log"
  done
  for round in $(seq "${AB_ROUNDS:-2}"); do
    for d in "$DIST" $AB_DISTS; do
      label=a dir="$CUDA_DIR"
      [ "$d" != "$DIST" ] && label="$(basename "$d")" dir="$d/build/$CUDA_VARIANT"
      run "${T_AB_PATHS:-60}" "A/B $label" bench/bench_paths.py --variant-dir "$dir=$label" \
        --steps "${AB_STEPS:-chain_backward}" --json "$OUT/ab_paths_${label}_$round.json" > /dev/null
    done
  done
}
stage_hfmodel() {
  if [ -z "${URL:-}" ]; then log "hfmodel stage skipped: kernelize loads from the hub"; return; fi
  [ "$T_HFTESTS" -gt 0 ] && { timeout "$T_HFTESTS" python3 -m pytest -m gpu -v -p no:cacheprovider \
    tests/loader/test_transformers_models.py > "$OUT/hf_tests.log" 2>&1; tail -3 "$OUT/hf_tests.log"; }
  # The script skips rows past its deadline and writes its JSON after each: the margin is for the row under way.
  # shellcheck disable=SC2086
  run "$T_HFMODEL" hfmodel bench/bench_hf_model.py --hub "$URL" --repo acme/fused-mlp \
    --deadline-s $((T_HFMODEL * 4 / 5)) --json "$OUT/hf_model.json" ${HF_ARGS:-}
}
for stage in $STAGES; do log "stage $stage"; "stage_$stage"; done
log "done; summary:"
python3 bench/summary.py "$OUT"
