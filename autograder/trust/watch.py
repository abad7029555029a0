"""Instruments for trusted code only (the reference, a catalogued variant): the course's GPT
built from weights (`trusted_gpt`), forward hooks that record a model's calls
(`install_watch`), and a census of the tensors a call creates (`TensorCensus`). A student's
code is never measured from inside its own process: that is done from outside (`student`)."""

from __future__ import annotations

MAX_WATCH_RECORDS = 5000


def trusted_gpt(fields: dict, state: dict):
    """The course's GPT (`coursekit.gpt.GPT`) with these weights, in this process."""
    import types

    from coursekit.gpt import GPT

    model = GPT(types.SimpleNamespace(**fields))
    model.load_state_dict(state)
    return model


def call_record(name: str, keep: str, first, output) -> dict:
    """What a watched call of a model's module leaves: its name, its input's shape, and by `keep`
    "input" (a small integer input, such as positions), "last" (the output at the last
    position: `output[:, -1]` of a `(B, T, V)` output; a `(B, V)` output is kept whole) or "io"
    (the input and the output whole: a small model's, for a step locator to replay)."""
    import torch

    record = {"module": name, "shape": list(getattr(first, "shape", ()))}
    if keep == "io":
        for key, value in (("input", first), ("output", output)):
            if isinstance(value, torch.Tensor) and value.numel() <= 65536:
                record[key] = value.detach().clone()
    if keep == "input" and isinstance(first, torch.Tensor) and first.numel() <= 65536:
        record["input"] = first.detach().clone()
    if keep == "last" and isinstance(output, torch.Tensor) and output.ndim >= 2:
        record["last"] = (output[..., -1, :] if output.ndim >= 3 else output).detach().clone()
    return record


def install_watch(module, spec: dict, records: list) -> list:
    """Forward hooks on `module`'s submodules (by name, what to keep: see `call_record`) that
    append one record per call to `records`. Trusted code only (the reference, a catalogued
    variant): a student's model is watched by the grader computing its layers itself
    (`Student.remote_model`), never by hooks in the student's process."""
    hooks = []
    for name, keep in spec.items():
        def hook(mod, inputs, output, _name=name, _keep=keep):
            if len(records) < MAX_WATCH_RECORDS:
                records.append(call_record(_name, _keep, inputs[0] if inputs else None, output))

        hooks.append(module.get_submodule(name).register_forward_hook(hook))
    return hooks


class TensorCensus:
    """The shapes of every tensor a call creates, by operator output (views included), via a
    TorchDispatchMode: how trusted code (the reference, a catalogued variant) shows its memory.
    Never used on a student's code, whose process could fool it: that is measured from outside
    (`Student.call(measure_memory=True)`)."""

    def __init__(self):
        self.shapes: dict[tuple, int] = {}

    def mode(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        census = self

        class Census(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for value in out if isinstance(out, tuple | list) else (out,):
                    shape = tuple(getattr(value, "shape", ()) or ())
                    if hasattr(value, "shape") and len(census.shapes) < 10_000:
                        census.shapes[shape] = census.shapes.get(shape, 0) + 1
                return out

        return Census()

    def largest(self, count: int = 20) -> list:
        """[[shape, times seen], ...], the largest shapes first."""
        import math

        ranked = sorted(self.shapes.items(), key=lambda item: -math.prod(item[0]))
        return [[list(shape), n] for shape, n in ranked[:count]]
