#!/usr/bin/env bash
# Build the CUTLASS EVT prototype (bench/cutlass_proto) on the CPU machine into bench/cutlass_proto/bin/, to carry to
# the GPU machine: nvcc 13, CUTLASS 4.2's headers from the nvidia-cutlass wheel (fetched once into CUTLASS_DIR), the
# CUDA torch venv's headers for kernel_src's common.cuh (the activation math), cuBLAS from its wheels. Each kernel is
# its own translation unit (about a minute each), built two at a time. Usage: bash bench/cutlass_proto/build.sh [KERNELS]
# (KERNELS: names from kernel_list.cuh; the driver links every kernel of the list, so a partial build only
# refreshes those objects).
set -euo pipefail
cd "$(dirname "$0")/../.."
py=.venv-cuda/bin/python
CUTLASS_DIR="${CUTLASS_DIR:-$HOME/.cache/fused-mlp/nvidia-cutlass-4.2.0.0}"
if [ ! -d "$CUTLASS_DIR/cutlass_library/source/include/cutlass" ]; then
  tmp=$(mktemp -d)
  $py -m pip download -q --no-deps --only-binary=:all: nvidia-cutlass==4.2.0.0 -d "$tmp"
  mkdir -p "$CUTLASS_DIR"
  $py -m zipfile -e "$tmp"/nvidia_cutlass-4.2.0.0-py3-none-any.whl "$CUTLASS_DIR"
  rm -rf "$tmp"
fi
src="$CUTLASS_DIR/cutlass_library/source"
ti=$($py -c "import torch, os; print(os.path.dirname(torch.__file__) + '/include')" 2>/dev/null)
nv=$($py -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]) + '/nvidia/cu13')" 2>/dev/null)
out=bench/cutlass_proto/bin
mkdir -p $out/obj
# -DNDEBUG: with CUTLASS's device asserts compiled in, ptxas serializes the wgmma pipeline (warning C7510).
flags=(-O3 -std=c++17 --expt-relaxed-constexpr -DNDEBUG -DUSE_CUDA -DTORCH_TARGET_VERSION=0x020b000000000000
  -I"$ti" -I"$src/include" -I"$src/tools/util/include" -Ibench/cutlass_proto -Ibench/cuda_proto
  -Ikernel_src/fused_mlp/cuda/csrc -I"$nv/include" -gencode arch=compute_90a,code=sm_90a -Xptxas -v)
# The kernels, in kernel_list.cuh's order (their index is the -DGEVT_INDEX of their translation unit).
mapfile -t names < <(sed -n 's/^  X(\([a-z0-9_]*\),.*/\1/p' bench/cutlass_proto/kernel_list.cuh)
kernels=${1:-${names[*]}}
pids=()
for k in $kernels; do
  index=-1
  for i in "${!names[@]}"; do [ "${names[$i]}" = "$k" ] && index=$i; done
  [ "$index" -ge 0 ] || { echo "no kernel '$k' in kernel_list.cuh (${names[*]})"; exit 1; }
  nvcc "${flags[@]}" -DGEVT_INDEX=$index -c bench/cutlass_proto/kernels.cu -o $out/obj/$k.o 2> $out/obj/$k.ptxas.txt &
  pids+=($!)
  if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}" || { cat $out/obj/*.ptxas.txt | grep -i error; exit 1; }; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p" || { cat $out/obj/*.ptxas.txt | grep -i error; exit 1; }; done
# A serialized wgmma pipeline or spills would make the timings meaningless: say so here, not on the GPU.
grep -l "C7510" $out/obj/*.ptxas.txt && { echo "ptxas serialized wgmma (C7510) in the files above"; exit 1; }
grep -h "spill stores" $out/obj/*.ptxas.txt | sort | uniq -c
nvcc "${flags[@]}" -o $out/gated_evt_proto bench/cutlass_proto/gated_evt_proto.cu $out/obj/*.o \
  -Xlinker "$nv/lib/libcublas.so.13" 2> $out/gated_evt_proto.ptxas.txt || { cat $out/gated_evt_proto.ptxas.txt; exit 1; }
echo "built $out/gated_evt_proto"
