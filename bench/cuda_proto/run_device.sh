#!/usr/bin/env bash
# Run the prototypes of bench/cuda_proto on the GPU machine (built here by build.sh, carried as bench/cuda_proto/bin):
# act_and_mul candidates, the sm_90a gate/up kernel's main variants next to cuBLAS, and Nsight Compute's view of
# cuBLAS's own [M, 2I] GEMM kernel (its name gives its tile and cluster shape). Output: $OUT/proto_*.txt.
# env: RUN (default "act_mul gate_up ncu"; also "grid", "ncu_ours" and "lt_rank": cuBLASLt's heuristic answers and
# cuBLAS timed on the op's GEMM shapes, LT_ROWS / LT_MLP_ROWS as lt_rank.cu's arguments), ACT_VARIANTS, GATE_UP_VARIANTS, GATE_UP_MODE
# (see each .cu's main), NCU_VARIANTS (the gate/up variants Nsight Compute profiles, one launch each at 8192 rows).
set -uo pipefail
cd "$(dirname "$0")/bin"
out=${OUT:-.}
# cuBLAS 13 from torch's wheels: the binaries link libcublas.so.13 by name
LD_LIBRARY_PATH=$(python3 -c "import glob,site;print([p for d in site.getsitepackages() for p in glob.glob(d+'/nvidia/**/libcublas.so.13',recursive=True)][0].rsplit('/',1)[0])")
export LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$out/proto_gpu.txt"
want() { [[ " ${RUN:-act_mul gate_up ncu} " == *" $1 "* ]]; }
want act_mul && timeout 120 ./act_mul_proto "${ACT_VARIANTS:-0,1,2,3,4,5,6,7,8,9}" > "$out/proto_act_mul.txt" 2>&1 && echo "act_mul ok"
want gate_up && timeout 240 ./gate_up_proto "${GATE_UP_VARIANTS:-0,7,13}" "${GATE_UP_MODE:-0}" > "$out/proto_gate_up.txt" 2>&1 && echo "gate_up ok"
if want ncu && command -v ncu > /dev/null; then
  timeout 120 ncu --clock-control none --section SpeedOfLight --section LaunchStats --section MemoryWorkloadAnalysis \
    -k regex:nvjet --launch-skip 1 --launch-count 1 ./gate_up_proto -1 4 > "$out/proto_ncu_cublas.txt" 2>&1 && echo "ncu ok"
fi
want lt_rank && timeout 180 ./lt_rank "${LT_ROWS:-8192}" "${LT_MLP_ROWS:-1024,4096,8192}" > "$out/proto_lt_rank.txt" 2>&1 \
  && echo "lt_rank ok"
want grid && timeout 60 ./gate_up_proto "${NCU_VARIANTS:-17}" 2 | grep grid > "$out/proto_grid.txt" 2>&1 && echo "grid ok"
if want ncu_ours && command -v ncu > /dev/null; then
  timeout 180 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats -k regex:gate_up_sm90 ./gate_up_proto "${NCU_VARIANTS:-17}" 2 > "$out/proto_ncu_ours.txt" 2>&1 \
    && echo "ncu_ours ok"
fi
