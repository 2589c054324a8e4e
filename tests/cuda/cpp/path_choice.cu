// Host-only probe of the path table search (choose_impl) against a generated table (tests/cuda/test_path_weights.py
// compiles it, no GPU needed): reads queries "op step sm rows weight_bytes captured", one a line, and prints the
// implementation chosen for each, one a line.
#include <cstdio>
#include <cstring>

#include "triton_launch.h"

using namespace fused_mlp;

namespace {

// The code of `name` in a generated name table, or -1.
int code_of(const char* const* names, int n, const char* name) {
  for (int i = 0; i < n; ++i)
    if (std::strcmp(names[i], name) == 0) return i;
  return -1;
}

}  // namespace

int main() {
  char op[64], step[64];
  int sm = 0, captured = 0;
  long long rows = 0, weight_bytes = 0;
  while (std::scanf("%63s %63s %d %lld %lld %d", op, step, &sm, &rows, &weight_bytes, &captured) == 6) {
    const int o = code_of(kOpNames, kNumOps, op), s = code_of(kStepNames, kNumSteps, step);
    if (o < 0 || s < 0) {
      std::fprintf(stderr, "unknown op %s or step %s\n", op, step);
      return 2;
    }
    const Impl impl = choose_impl(static_cast<Step>(s), static_cast<Op>(o), sm, rows, weight_bytes, captured != 0);
    std::printf("%s\n", kImplNames[static_cast<int>(impl)]);
  }
  return 0;
}
