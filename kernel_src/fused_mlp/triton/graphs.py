"""One host call per small-batch forward: whole `mlp` / `gated_mlp` forwards captured as CUDA graphs.

At small batch the GPU work is a few microseconds while every Python-level launch costs ~10-16 us of
CPU, so a forward of 2-3 Triton launches is host-bound. A graph replay launches them all for ~4 us.
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

CAPACITY = 32
WARM_CALLS = 2
MAX_ROWS = 2048  # above this the GPU time exceeds the host time of direct launches
ENABLED = os.environ.get("FUSED_MLP_GRAPHS", "1") != "0"


class GraphCache:
    """LRU of captured CUDA graphs; `run` replays, counts, or captures."""

    def __init__(self, capacity: int = CAPACITY, warm_calls: int = WARM_CALLS):
        self.capacity = capacity
        self.warm_calls = warm_calls
        self._graphs: OrderedDict[tuple, torch.cuda.CUDAGraph] = OrderedDict()
        self._seen: dict[tuple, int] = {}

    def __len__(self) -> int:
        return len(self._graphs)

    def run(self, key: tuple, launch: Callable[[], object]) -> None:
        """Replay key's graph, or run `launch` directly (capturing it once key is warm)."""
        graph = self._graphs.get(key)
        if graph is not None:
            self._graphs.move_to_end(key)
            graph.replay()
            return
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


def usable(x2: torch.Tensor) -> bool:
    """Whether this call may go through a cached graph (small batch, not inside the user's capture)."""
    return ENABLED and x2.shape[0] <= MAX_ROWS and not torch.cuda.is_current_stream_capturing()


def tensor_key(t: torch.Tensor | None) -> tuple:
    if t is None:
        return ()
    return (t.data_ptr(), t.shape, t.stride(0) if t.dim() else 0, t.dtype)
