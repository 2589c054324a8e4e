#!/usr/bin/env bash
# Build the standalone CUDA prototypes of bench/cuda_proto on the CPU machine (nvcc 13, the CUDA torch venv's
# headers for kernel_src's common.cuh, cuBLAS from its wheels) into bench/cuda_proto/bin/, to carry to the GPU
# machine (whose torch headers are older than the stable-ABI sources need). Usage: [PROTOS="lt_rank ..."] bash bench/cuda_proto/build.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
py=.venv-cuda/bin/python
ti=$($py -c "import torch, os; print(os.path.dirname(torch.__file__) + '/include')")
nv=$($py -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]) + '/nvidia/cu13')")
out=bench/cuda_proto/bin
mkdir -p $out
flags=(-O3 -std=c++17 --expt-relaxed-constexpr -DUSE_CUDA -DTORCH_TARGET_VERSION=0x020b000000000000 -I"$ti"
  -Ibench/cuda_proto -Ikernel_src/fused_mlp/cuda/csrc -I"$nv/include" -gencode arch=compute_90a,code=sm_90a -Xptxas -v)
for proto in ${PROTOS:-gate_up_proto act_mul_proto lt_rank}; do
  nvcc "${flags[@]}" -o $out/$proto bench/cuda_proto/$proto.cu -Xlinker "$nv/lib/libcublas.so.13" -Xlinker "$nv/lib/libcublasLt.so.13" 2> $out/$proto.ptxas.txt \
    || { cat $out/$proto.ptxas.txt; exit 1; }
  grep -E "spill" $out/$proto.ptxas.txt | sort | uniq -c | head -5
done
