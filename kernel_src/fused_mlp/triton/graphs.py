"""One host call per `mlp` / `gated_mlp` forward: whole forwards captured as CUDA graphs, replayed.

A Python-level Triton launch costs ~30 us of CPU on the H200 host (bench/RESULTS.md), so a forward of
2-3 launches is host-bound up to large batches; a graph replay launches them all for ~3.5 us.
A graph is keyed by everything its launches read: op, activation, and each tensor's address, shape,
row stride and dtype, and the output's address (outputs are fresh tensors, allocated before the
lookup; the caching allocator hands the same few addresses back in a steady loop). A key is captured
on its WARM_CALLS-th use, so one-off shapes never pay for a capture.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable

import torch

CAPACITY = 16
WARM_CALLS = 2
# Graph-cache calls whose input has at most this many elements (8192 x 4096): even M=8192 forwards are
# host-bound without a graph (M=8192 mlp: 180 us direct vs 109 us replayed). Each graph keeps its
# intermediates (at most a few tens of MB at this bound) in its own memory pool.
MAX_INPUT_ELEMENTS = 8192 * 4096
ENABLED = os.environ.get("FUSED_MLP_GRAPHS", "1") != "0"
_capturing = torch._C._cuda_isCurrentStreamCapturing


class GraphCache:
    """LRU of captured CUDA graphs: `replay` on a hit, else `run` counts, launches, or captures."""

    def __init__(self, capacity: int = CAPACITY, warm_calls: int = WARM_CALLS):
        self.capacity = capacity
        self.warm_calls = warm_calls
        self._graphs: OrderedDict[tuple, torch.cuda.CUDAGraph] = OrderedDict()
        self._seen: dict[tuple, int] = {}

    def __len__(self) -> int:
        return len(self._graphs)

    def replay(self, key: tuple) -> bool:
        """Replay key's graph; False when there is none."""
        graph = self._graphs.get(key)
        if graph is None:
            return False
        self._graphs.move_to_end(key)
        graph.replay()
        return True

    def run(self, key: tuple, launch: Callable[[], object]) -> None:
        """Run `launch` directly, or capture it as key's graph once key is warm, then replay it."""
        seen = self._seen.get(key, 0) + 1
        if seen < self.warm_calls:
            if len(self._seen) > 16 * self.capacity:
                self._seen.clear()
            self._seen[key] = seen
            launch()
            return
        self._seen.pop(key, None)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            launch()
        graph.replay()
        self._graphs[key] = graph
        if len(self._graphs) > self.capacity:
            self._graphs.popitem(last=False)


CACHE = GraphCache()


def usable(x: torch.Tensor) -> bool:
    """Whether this call may use a cached graph: enabled, CUDA, not too large, not inside a capture."""
    return ENABLED and x.is_cuda and x.numel() <= MAX_INPUT_ELEMENTS and not _capturing()
