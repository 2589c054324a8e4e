#!/usr/bin/env bash
# Run the CUTLASS EVT prototype on the GPU machine (built here by build.sh, carried as bench/cutlass_proto/bin):
# correctness of each kernel and GPU µs next to cuBLAS + the elementwise passes. Output: $OUT/cutlass_evt.txt (one
# JSON line per kernel and problem, then the per-step sums) and, with NCU=1, Nsight Compute's view of each kernel.
# env: KERNELS (default all; a comma list of names as in kernel_list.cuh: a kernel runs when its name occurs in the
# list, so name each one: upact_pp does not select upact_pp_gt, while upact_pp_gt also runs upact_pp), ROWS (default 8192,1024), SHAPES (HxI list, default
# 768x3072,4096x11008: the issue's gated shape and a llama-7B-sized one), NCU (0), ACTS (the timed problems'
# activation codes, default 3 = gelu_tanh; 0 = none leaves the epilogue only its loads and stores: each code other
# than 3 writes cutlass_evt_act<code>.txt), NCU_METRICS (instead of the two sections: an ncu --metrics list, e.g.
# regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio for the stall reasons; the checks' launches are
# left out then).
set -uo pipefail
cd "$(dirname "$0")/bin"
out=${OUT:-.}
LD_LIBRARY_PATH=$(python3 -c "import glob,site;print([p for d in site.getsitepackages() for p in glob.glob(d+'/nvidia/**/libcublas.so.13',recursive=True)][0].rsplit('/',1)[0])")
export LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader \
  | tee "$out/cutlass_gpu.txt"
for act in ${ACTS:-3}; do
  name=cutlass_evt; [ "$act" = 3 ] || name=cutlass_evt_act$act
  GEVT_ACT=$act timeout 300 ./gated_evt_proto "${KERNELS:-all}" "${ROWS:-8192,1024}" "${SHAPES:-768x3072,4096x11008}" \
    > "$out/$name.txt" 2>&1; echo "gated_evt_proto act $act rc=$?"
done
if [ "${NCU:-0}" = 1 ] && command -v ncu > /dev/null; then
  if [ -n "${NCU_METRICS:-}" ]; then
    what=(--metrics "$NCU_METRICS"); file=cutlass_ncu_metrics.txt; export GEVT_NO_CHECK=1
  else
    what=(--section SpeedOfLight --section MemoryWorkloadAnalysis); file=cutlass_ncu.txt
  fi
  GEVT_ONCE=1 timeout 200 ncu --clock-control none "${what[@]}" -k regex:device_kernel \
    ./gated_evt_proto "${KERNELS:-all}" 8192 > "$out/$file" 2>&1; echo "ncu rc=$?"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$out/cutlass_gpu.txt"
