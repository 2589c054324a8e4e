// One CUTLASS kernel of kernel_list.cuh per translation unit (each takes about a minute to compile): build.sh
// compiles this file once per entry with -DGEVT_INDEX=<its position>; the driver (gated_evt_proto.cu) links them all.
#include "gated_evt_impl.cuh"
#include "kernel_list.cuh"

#ifndef GEVT_INDEX
#error "compile with -DGEVT_INDEX=<position in kernel_list.cuh> (see build.sh)"
#endif

namespace gated_evt {
template const char* run_at<GEVT_INDEX>(const Args&, void*, cudaStream_t, int);
template size_t workspace_at<GEVT_INDEX>(const Args&, int);
template bool can_implement_at<GEVT_INDEX>(const Args&, int);
}  // namespace gated_evt
