// The CUTLASS kernels of the prototype, one per translation unit: build.sh compiles this file once per name with
// -DGEVT_<name> (each takes minutes), the driver (gated_evt_proto.cu) links them all.
// cooperative: 256x128x64 tiles (two consumer warpgroups of 128x128), clusters of 1x2: cuBLAS's own choice for
// these shapes (nvjet_sm90_tst_256x128_64x4_1x2 in bench/RESULTS.md's Nsight Compute runs).
// pingpong: 128x128x64 tiles, one per consumer warpgroup, the two alternating, so one's epilogue overlaps the
// other's main loop (what an aux-heavy epilogue needs), clusters of 2x1.
// sk: cooperative 128x128x64 with the stream-K scheduler: at 1024 rows a 256x128 tiling has 96 tiles for 132 SMs.
#include "gated_evt_impl.cuh"

namespace gated_evt {
using CoopTile = Shape<_256, _128, _64>;
using CoopCluster = Shape<_1, _2, _1>;
using PpTile = Shape<_128, _128, _64>;
using PpCluster = Shape<_2, _1, _1>;
using SkTile = Shape<_128, _128, _64>;
using SkCluster = Shape<_1, _1, _1>;
using StreamK = cutlass::gemm::StreamKScheduler;
}  // namespace gated_evt

#if defined(GEVT_plain_coop)
GATED_EVT_KERNEL(plain_coop, Gemm<Form::Plain, Bf16, ColMajor, CoopTile, CoopCluster, Coop, CoopEpi>)
#elif defined(GEVT_upact_coop)
GATED_EVT_KERNEL(upact_coop, Gemm<Form::UpAct, Bf16, ColMajor, CoopTile, CoopCluster, Coop, CoopEpi>)
#elif defined(GEVT_upactu_coop)
GATED_EVT_KERNEL(upactu_coop, Gemm<Form::UpActU, Bf16, ColMajor, CoopTile, CoopCluster, Coop, CoopEpi>)
#elif defined(GEVT_dgrad_coop)
GATED_EVT_KERNEL(dgrad_coop, Gemm<Form::Dgrad, Bf16, RowMajor, CoopTile, CoopCluster, Coop, CoopEpi>)
#elif defined(GEVT_plain_pp)
GATED_EVT_KERNEL(plain_pp, Gemm<Form::Plain, Bf16, ColMajor, PpTile, PpCluster, Pingpong, PingpongEpi>)
#elif defined(GEVT_upact_pp)
GATED_EVT_KERNEL(upact_pp, Gemm<Form::UpAct, Bf16, ColMajor, PpTile, PpCluster, Pingpong, PingpongEpi>)
#elif defined(GEVT_upactu_pp)
GATED_EVT_KERNEL(upactu_pp, Gemm<Form::UpActU, Bf16, ColMajor, PpTile, PpCluster, Pingpong, PingpongEpi>)
#elif defined(GEVT_dgrad_pp)
GATED_EVT_KERNEL(dgrad_pp, Gemm<Form::Dgrad, Bf16, RowMajor, PpTile, PpCluster, Pingpong, PingpongEpi>)
#elif defined(GEVT_plain_sk)
GATED_EVT_KERNEL(plain_sk, Gemm<Form::Plain, Bf16, ColMajor, SkTile, SkCluster, Coop, CoopEpi, StreamK>)
#elif defined(GEVT_upact_sk)
GATED_EVT_KERNEL(upact_sk, Gemm<Form::UpAct, Bf16, ColMajor, SkTile, SkCluster, Coop, CoopEpi, StreamK>)
#elif defined(GEVT_dgrad_sk)
GATED_EVT_KERNEL(dgrad_sk, Gemm<Form::Dgrad, Bf16, RowMajor, SkTile, SkCluster, Coop, CoopEpi, StreamK>)
#elif defined(GEVT_plain_coop_h)  // fp16: the cooperative kernels, for the numerics the shipped ops need
GATED_EVT_KERNEL(plain_coop_h, Gemm<Form::Plain, Fp16, ColMajor, CoopTile, CoopCluster, Coop, CoopEpi>)
#elif defined(GEVT_upact_coop_h)
GATED_EVT_KERNEL(upact_coop_h, Gemm<Form::UpAct, Fp16, ColMajor, CoopTile, CoopCluster, Coop, CoopEpi>)
#elif defined(GEVT_upactu_coop_h)
GATED_EVT_KERNEL(upactu_coop_h, Gemm<Form::UpActU, Fp16, ColMajor, CoopTile, CoopCluster, Coop, CoopEpi>)
#elif defined(GEVT_dgrad_coop_h)
GATED_EVT_KERNEL(dgrad_coop_h, Gemm<Form::Dgrad, Fp16, RowMajor, CoopTile, CoopCluster, Coop, CoopEpi>)
#else
#error "compile with -DGEVT_<kernel name> (see build.sh)"
#endif
