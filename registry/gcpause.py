"""Python's cyclic garbage collector paused while `get_kernel` imports and loads.

After `import torch` a process holds millions of objects, and every full collection walks them all (~70 ms on
the 2-core CPU machine). Importing the loader and a kernel allocates enough to trigger one or two of them, about
half of a warm `get_kernel`; what we allocate there is long-lived (modules, functions), so there is nothing
for those passes to free. The collector's previous state is restored on exit.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def gc_paused():
    """`with gc_paused():`, or `@gc_paused()` on a function."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
