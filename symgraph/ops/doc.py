"""Writes the op reference (docs/ops.md) from the registry.

    python -m symgraph.ops.doc > docs/ops.md

A test checks that the committed docs/ops.md equals this output, so the
reference never drifts from the code.
"""
from __future__ import annotations

import inspect

from . import all_opdefs
from .registry import REQUIRED, format_attr

_FAMILIES = ("elementwise", "tensor", "reduce", "nn", "loss")
# the layer families ops/nn.py gathers, listed together under nn
_NN_PARTS = {"dense": "nn", "conv": "nn", "pool": "nn", "norm": "nn", "activation": "nn"}
# other modules listed under a family (MXNet files dot under its tensor ops)
_PARTS = {**_NN_PARTS, "dot": "tensor", "glue": "tensor", "arrange": "tensor",
          "constants": "tensor", "normalize": "nn", "resample": "nn", "spatial": "nn",
          "losses": "loss", "mathops": "elementwise", "indexing": "tensor",
          "ordering": "reduce", "sequence": "nn"}


def _family(op) -> str:
    mod = inspect.getmodule(op.lower) or inspect.getmodule(op.infer_shape)
    name = (mod.__name__ if mod else "").rsplit(".", 1)[-1]
    name = _PARTS.get(name, name)
    return name if name in _FAMILIES else "other"


def _names(fn_or_list, p) -> str:
    try:
        return ", ".join(fn_or_list(p)) or "—"
    except Exception:  # depends on attributes; show the default-attribute case
        return "(depends on attributes)"


def _attr_line(name, spec) -> str:
    default = "required" if spec.default is REQUIRED else f"default `{format_attr(spec.default)}`"
    kind = getattr(spec.parse, "choices", None)
    kind = " | ".join(kind) if kind else spec.parse.__name__.replace("_attr", "")
    return f"`{name}` ({kind}, {default})"


def render() -> str:
    lines = ["# Op reference", "",
             "Generated from the op registry by `python -m symgraph.ops.doc`; do not edit.",
             "Every op listed has shape inference, a lowering checked against a NumPy",
             "reference, and a gradient checked against NumPy gradients written from the",
             "math (layers) or `jax.vjp` of the forward (ops with hand-written backward",
             "rules) (tests/test_ops.py, tests/test_grad_reference.py).",
             "Names, attribute names and defaults follow MXNet 1.x.", ""]
    ops = [op for op in all_opdefs() if not op.name.startswith("_backward")]
    by_family: dict[str, list] = {}
    for op in ops:
        by_family.setdefault(_family(op), []).append(op)
    for fam in (*_FAMILIES, "other"):
        if fam not in by_family:
            continue
        lines += [f"## {fam}", ""]
        for op in sorted(by_family[fam], key=lambda o: o.name.lower()):
            sample = op.samples[0].attrs if op.samples else {}
            try:
                _, p = op.parse_attrs(sample, op.name)
            except Exception:
                p = None
            title = op.name + (f" (aliases: {', '.join(op.aliases)})" if op.aliases else "")
            lines.append(f"### {title}")
            if op.doc:
                lines += ["", op.doc.strip()]
            lines.append("")
            if op.attrs:
                lines.append("- attributes: " + "; ".join(
                    _attr_line(k, v) for k, v in op.attrs.items()))
            if p is not None:
                lines.append(f"- inputs: {_names(op.arg_names, p)}")
                aux = _names(op.aux_names, p)
                if aux != "—":
                    lines.append(f"- aux states: {aux}")
                lines.append(f"- outputs: {_names(op.output_names, p)}")
                try:
                    pairs = op.inplace(p)
                except Exception:
                    pairs = []
                if pairs:
                    lines.append("- inplace: " + ", ".join(f"output {o} over input {i}"
                                                          for i, o in pairs))
            lines.append(f"- category: {op.category}" + (" · loss head" if op.is_loss else "")
                         + (" · random" if op.needs_rng else ""))
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
