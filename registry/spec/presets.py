"""The real-model shape suite: MLP blocks named after the models that use them, as plain data.

One home for the widths bench/, `kernel-hub bench` and the loader's speed check time: each `Preset` is
one model's MLP block (a gated `gated_mlp` down(act(gate(x)) * up(x)) without biases, or a plain `mlp`
chain of linears with `activation` between them), plus the project's two original benchmark shapes.
`suite()` expands them to cases: every preset at every row count M of `ROWS` in every dtype of `DTYPES`
forward, and forward + backward at `TRAIN_ROWS`. Standard library only: the hub and the pages read it
without torch; callers map the dtype names to torch dtypes themselves.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# Decode (1-64 rows), through prefill chunks, to training batches of tokens.
ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
TRAIN_ROWS = (16, 512, 4096)  # forward + backward: small, medium and large batches of tokens
DTYPES = ("bfloat16", "float16")  # torch dtype names (getattr(torch, name))
OPS = ("gated_mlp", "mlp")
# The fused-MLP API's activations (docs/CONTRACTS.md), spelled here because the registry never imports a kernel
# package; tests/test_presets.py keeps it equal to fused_mlp.reference.ACTIVATIONS.
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")


def check_activation(what: str, activation: str) -> None:
    """A ValueError naming `what` and the choices unless `activation` is one of ACTIVATIONS (a typo such as
    "swiglu" fails where it is typed, not as unexplained failed timings)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"{what}: activation {activation!r} is not one of {', '.join(ACTIVATIONS)}")


@dataclass(frozen=True)
class Preset:
    """One model's MLP block: `op` gated_mlp | mlp, `widths` (hidden, intermediate) or the chain's in->...->out."""

    name: str
    op: str
    widths: tuple[int, ...]
    activation: str  # one of ACTIVATIONS
    bias: bool = False  # every linear has a bias (mlp only; gated_mlp has none)
    note: str = ""

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"preset {self.name!r}: op must be one of {', '.join(OPS)}, got {self.op!r}")
        if (len(self.widths) != 2) if self.op == "gated_mlp" else (len(self.widths) < 2):
            raise ValueError(f"preset {self.name!r}: widths {self.widths} do not fit op {self.op}")
        if self.bias and self.op == "gated_mlp":
            raise ValueError(f"preset {self.name!r}: gated_mlp takes no biases")
        check_activation(f"preset {self.name!r}", self.activation)

    @property
    def hidden(self) -> int:
        """The model width: rows of x have this many features, and so does the output."""
        return self.widths[0]

    @property
    def intermediate(self) -> int:
        """The widest inner width (I of a gated block, the hidden layer of an mlp)."""
        return max(self.widths[1:]) if self.op == "mlp" else self.widths[1]

    @property
    def weight_shapes(self) -> tuple[tuple[int, int], ...]:
        """(out, in) of each weight in call order: gate, up, down; or the chain's layers."""
        if self.op == "gated_mlp":
            h, i = self.widths
            return ((i, h), (i, h), (h, i))
        return tuple(zip(self.widths[1:], self.widths[:-1]))

    def weight_bytes(self, elem: int) -> int:
        """Bytes of weights and biases at `elem` bytes an element: what a decode step must read at least."""
        n = sum(o * k for o, k in self.weight_shapes)
        if self.bias:
            n += sum(o for o, _ in self.weight_shapes)
        return n * elem

    def flops(self, rows: int, train: bool = False) -> int:
        """Multiply-add FLOPs of the GEMMs (backward = twice the forward)."""
        return (3 if train else 1) * 2 * rows * sum(o * k for o, k in self.weight_shapes)


@dataclass(frozen=True)
class Case:
    """One timed shape: a preset at `rows` rows in `dtype`, forward or (`train`) forward + backward."""

    preset: Preset
    rows: int
    dtype: str
    train: bool = False

    @property
    def label(self) -> str:
        """e.g. `llama-3-8b M=16 bfloat16 fwd+bwd`: the row name of tables and speed records."""
        return f"{self.preset.name} M={self.rows} {self.dtype}" + (" fwd+bwd" if self.train else "")


PRESETS = (
    Preset("llama-3-8b", "gated_mlp", (4096, 14336), "silu", note="SwiGLU; also Mistral-7B"),
    Preset("qwen2.5-7b", "gated_mlp", (3584, 18944), "silu", note="SwiGLU"),
    Preset("llama-3.2-1b", "gated_mlp", (2048, 8192), "silu", note="SwiGLU"),
    Preset("gemma-2-2b", "gated_mlp", (2304, 9216), "gelu_tanh", note="GeGLU, gelu_pytorch_tanh"),
    Preset("gpt2", "mlp", (768, 3072, 768), "gelu_tanh", bias=True, note="c_fc, gelu_new, c_proj"),
    Preset("bert-large", "mlp", (1024, 4096, 1024), "gelu", bias=True, note="intermediate, output dense"),
    # The project's original benchmark shapes (registry/client/workloads.py DEFAULT_DIMS).
    Preset("mlp-3x1024", "mlp", (1024, 1024, 1024, 1024), "relu", bias=True, note="3xLinear(1024)+ReLU"),
    Preset("geglu-768-3072", "gated_mlp", (768, 3072), "gelu_tanh", note="GeGLU-tanh H=768 I=3072"),
)
_BY_NAME = {p.name: p for p in PRESETS}


def names() -> tuple[str, ...]:
    return tuple(_BY_NAME)


# A block outside the suite, named by its shape: OP:DIMS:ACTIVATION[+bias], e.g. gated_mlp:5120x14336:silu
# (Mistral-Nemo's widths) or mlp:768x3072x768:gelu_tanh+bias, so that widths no preset has can be timed too.
_SPEC = re.compile(r"(?P<op>\w+):(?P<dims>\d+(?:x\d+)+):(?P<act>[a-z_]+)(?P<bias>\+bias)?")


def get(name: str) -> Preset:
    """The preset called `name`, or the block a shape spec names (`_SPEC`); a ValueError listing every name
    and the spec's form otherwise."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    spec = _SPEC.fullmatch(name)
    if spec is None:
        raise ValueError(
            f"unknown shape preset {name!r}; use one of {', '.join(_BY_NAME)}, or a shape as "
            "OP:DIMS:ACTIVATION[+bias] (e.g. gated_mlp:5120x14336:silu, mlp:768x3072x768:gelu_tanh+bias)"
        )
    dims = tuple(int(d) for d in spec["dims"].split("x"))
    if min(dims) < 1:
        raise ValueError(f"shape {name!r}: every width must be positive")
    return Preset(
        name, spec["op"], dims, spec["act"], bias=bool(spec["bias"]), note="a shape outside the suite"
    )


def suite(
    presets: Iterable[str | Preset] | None = None,
    rows: Iterable[int] = ROWS,
    dtypes: Iterable[str] = DTYPES,
    train_rows: Iterable[int] = TRAIN_ROWS,
) -> Iterator[Case]:
    """Every case of `presets` (default all): forward at `rows`, then forward + backward at `train_rows`."""
    chosen = [p if isinstance(p, Preset) else get(p) for p in (PRESETS if presets is None else presets)]
    rows, dtypes, train_rows = tuple(rows), tuple(dtypes), tuple(train_rows)
    for p in chosen:
        for train, ms in ((False, rows), (True, train_rows)):
            for dtype in dtypes:
                for m in ms:
                    yield Case(p, m, dtype, train)
