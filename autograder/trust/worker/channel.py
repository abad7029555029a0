"""The wire format between the grader and the sandboxed worker: data only, never code.

A message is one frame: an 8-byte big-endian length, then that many bytes. The bytes are
a 4-byte length, a JSON header, then the blobs the header points to. Arrays travel as their
raw bytes, with a plain numeric dtype and a shape in the header that must account for every
byte; tensors as their NumPy bytes plus a dtype name; tuples, lists and dicts as tagged
JSON. Nothing in here ever unpickles, imports or calls anything named by the other side,
so the worst a forged message can do
is fail to decode: `decode` raises `ChannelError` for anything it does not expect (object
arrays, subclasses, deep nesting, oversized payloads).

Both sides import this file: the grader as `autograder.worker.channel`, the worker as
`channel` (it is bound into the sandbox on its own).
"""

from __future__ import annotations

import json
import os
import select
import struct
import sys
import time

MAX_MESSAGE_BYTES = 64 << 20  # a message larger than this is refused unread
MAX_HEADER_BYTES = 8 << 20  # its JSON header: checked before the header is parsed
MAX_DEPTH = 32  # nesting of tuples, lists and dicts
MAX_NODES = 200_000  # values in one message
MAX_STRING = 1 << 20  # characters in one string
ARRAY_KINDS = "biufc"  # bool, ints, unsigned ints, floats, complex: never objects or structs
TICK = 0.2  # seconds: how often a wait asks its `patience`


class ChannelError(Exception):
    """A message that is malformed, too large, too deep or of a type the format refuses."""


class ChannelTimeout(ChannelError):
    pass


class ChannelClosed(ChannelError):
    pass


# ---------------------------------------------------------------- values <-> JSON and blobs


class Ref:
    """A reference to something that lives on the other side: a function to call back (`fn`)
    or an object held by the worker (`obj`). Only its number crosses."""

    __slots__ = ("kind", "id")

    def __init__(self, kind: str, id: int):
        self.kind, self.id = kind, id

    def __repr__(self):
        return f"Ref({self.kind!r}, {self.id})"


def _array_fields(array, blobs: list[bytes]) -> dict:
    """A C-contiguous array as its raw bytes (appended to `blobs`) and the fields that read them
    back: "b" the blob, "dt" its dtype's string ('<f4'), "sh" its shape. (No .npy header to
    parse: a layer's input crosses in a microsecond or two instead of forty.)"""
    blobs.append(array.tobytes())
    return {"b": len(blobs) - 1, "dt": array.dtype.str, "sh": [int(n) for n in array.shape]}


def encode(value, blobs: list[bytes], refs=None, depth: int = 0):
    """`value` as JSON-able data, appending array bytes to `blobs`.

    `refs(value)` may turn a value the format cannot carry (a function, a module) into a
    `Ref`; without it such a value raises ChannelError.
    """
    if depth > MAX_DEPTH:
        raise ChannelError("the value is nested too deeply")
    # The encoder reads subclasses as their base type: it may run in the student's process,
    # where a lying subclass only fools itself, and the decoder on the grader's side builds
    # plain values from the bytes alone.
    if value is None:
        return None
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        value = int(value)
        return value if abs(value) < 2**53 else {"t": "bigint", "v": str(value)}
    if isinstance(value, float):
        return {"t": "float", "v": repr(float(value))}  # keeps nan and inf exact
    if isinstance(value, Ref):
        return {"t": "ref", "k": value.kind, "id": value.id}
    if isinstance(value, tuple | list):
        tag = "tuple" if isinstance(value, tuple) else "list"
        return {"t": tag, "v": [encode(v, blobs, refs, depth + 1) for v in list(value)]}
    if isinstance(value, dict):
        keys = list(value)
        if not all(isinstance(k, str | int) and not isinstance(k, bool) for k in keys):
            raise ChannelError("only dicts with str or int keys can be sent")
        return {"t": "dict", "k": [k if type(k) in (str, int) else (str(k) if isinstance(k, str) else int(k))
                                   for k in keys],
                "v": [encode(value[k], blobs, refs, depth + 1) for k in keys]}
    np = sys.modules.get("numpy")  # only look for arrays where numpy is already in use
    if np is not None:
        if isinstance(value, np.ndarray | np.generic):
            array = np.asarray(value).view(np.ndarray)
            if array.dtype.kind not in ARRAY_KINDS:
                raise ChannelError(f"arrays of dtype {array.dtype} cannot be sent")
            if not array.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d array 1-d)
                array = np.ascontiguousarray(array)
            return {"t": "nd" if isinstance(value, np.ndarray) else "npscalar", **_array_fields(array, blobs)}
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "Tensor"):
        if isinstance(value, torch.Tensor):
            tensor = torch.Tensor.as_subclass(value.detach(), torch.Tensor).cpu().contiguous()
            dtype = str(tensor.dtype).removeprefix("torch.")
            if tensor.dtype == torch.bfloat16:
                array = tensor.view(torch.int16).numpy()
            else:
                array = tensor.numpy()
            return {"t": "tensor", **_array_fields(array, blobs), "dtype": dtype,
                    "param": isinstance(value, torch.nn.Parameter), "grad": bool(value.requires_grad)}
        if isinstance(value, torch.Size):
            return {"t": "tuple", "v": [int(v) for v in value]}
        if isinstance(value, torch.dtype):
            return {"t": "torch_dtype", "v": str(value).removeprefix("torch.")}
    if refs is not None:
        ref = refs(value)
        if ref is not None:
            return encode(ref, blobs, refs, depth)
    raise ChannelError(f"a {type(value).__module__}.{type(value).__qualname__} cannot be sent")


def payload_bytes(value, depth: int = 0) -> int:
    """About how many bytes `value` would take on the wire (its arrays' and strings' sizes), without
    encoding it: a value too large to send is refused before it is copied."""
    if depth > MAX_DEPTH:
        return 0
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, tuple | list):
        return sum(payload_bytes(v, depth + 1) for v in list(value)[:MAX_NODES])
    if isinstance(value, dict):
        return sum(payload_bytes(v, depth + 1) for v in list(value.values())[:MAX_NODES])
    nbytes = getattr(value, "nbytes", None)  # NumPy arrays and PyTorch tensors both say
    return int(nbytes) if isinstance(nbytes, int) else 8


class _Budget:
    def __init__(self):
        self.nodes = 0

    def tick(self):
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ChannelError("the value has too many parts")


def _load_array(data: bytes, obj: dict):
    """The array `_array_fields` described: a new, writable one, of a plain numeric dtype only."""
    import numpy as np

    code, shape = obj["dt"], obj["sh"]
    if type(code) is not str or len(code) > 8 or type(shape) is not list or len(shape) > MAX_DEPTH \
            or not all(type(n) is int and n >= 0 for n in shape):
        raise ChannelError("malformed array")
    try:
        dtype = np.dtype(code)
    except TypeError:
        raise ChannelError(f"arrays of dtype {code!r} are refused") from None
    if dtype.kind not in ARRAY_KINDS or dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise ChannelError(f"arrays of dtype {dtype} are refused")
    count = 1
    for n in shape:
        count *= n
    if count * dtype.itemsize != len(data):
        raise ChannelError("an array's bytes do not match its shape")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def decode(obj, blobs: list[bytes], budget: _Budget | None = None, depth: int = 0):
    """The inverse of `encode`: plain Python, NumPy and torch values, and `Ref`s."""
    budget = budget or _Budget()
    budget.tick()
    if depth > MAX_DEPTH:
        raise ChannelError("the value is nested too deeply")
    if obj is None or type(obj) in (bool, int):
        return obj
    if type(obj) is str:
        if len(obj) > MAX_STRING:
            raise ChannelError("a string is too long")
        return obj
    if type(obj) is not dict or type(obj.get("t")) is not str:
        raise ChannelError("malformed value")
    tag = obj["t"]
    try:
        if tag == "float":
            text = obj["v"]
            if type(text) is not str or len(text) > 64:
                raise ChannelError("malformed float")
            return float(text)
        if tag == "bigint":
            text = obj["v"]
            if type(text) is not str or len(text) > 4000:
                raise ChannelError("malformed integer")
            return int(text)
        if tag in ("tuple", "list"):
            items = obj["v"]
            if type(items) is not list:
                raise ChannelError("malformed sequence")
            values = [decode(v, blobs, budget, depth + 1) for v in items]
            return tuple(values) if tag == "tuple" else values
        if tag == "dict":
            keys, items = obj["k"], obj["v"]
            if type(keys) is not list or type(items) is not list or len(keys) != len(items):
                raise ChannelError("malformed dict")
            if not all(type(k) in (str, int) for k in keys):
                raise ChannelError("malformed dict keys")
            return {k: decode(v, blobs, budget, depth + 1) for k, v in zip(keys, items, strict=True)}
        if tag in ("nd", "npscalar", "tensor"):
            index = obj["b"]
            if type(index) is not int or not 0 <= index < len(blobs):
                raise ChannelError("malformed array reference")
            array = _load_array(blobs[index], obj)
            if tag == "nd":
                return array
            if tag == "npscalar":
                if array.ndim != 0:
                    raise ChannelError("malformed scalar")
                return array[()]
            return _tensor(array, obj)
        if tag == "torch_dtype":
            import torch

            dtype = getattr(torch, str(obj["v"]), None)
            if not isinstance(dtype, torch.dtype):
                raise ChannelError("malformed dtype")
            return dtype
        if tag == "ref":
            kind, ident = obj["k"], obj["id"]
            if kind not in ("fn", "obj") or type(ident) is not int:
                raise ChannelError("malformed reference")
            return Ref(kind, ident)
    except (KeyError, TypeError, ValueError) as err:
        raise ChannelError(f"malformed value ({type(err).__name__})") from None
    raise ChannelError(f"unknown value tag {tag!r}")


def _tensor(array, obj):
    import torch

    dtype_name = obj.get("dtype")
    dtype = getattr(torch, dtype_name, None) if type(dtype_name) is str else None
    if not isinstance(dtype, torch.dtype):
        raise ChannelError("malformed tensor dtype")
    if dtype == torch.bfloat16:
        if array.dtype.name != "int16":
            raise ChannelError("malformed bfloat16 tensor")
        tensor = torch.from_numpy(array.copy()).view(torch.bfloat16)
    else:
        tensor = torch.from_numpy(array.copy())
        if tensor.dtype != dtype:
            raise ChannelError("tensor dtype does not match its bytes")
    if obj.get("param") is True:
        return torch.nn.Parameter(tensor, requires_grad=bool(obj.get("grad")))
    if obj.get("grad") is True and tensor.is_floating_point():
        tensor.requires_grad_(True)
    return tensor


# ---------------------------------------------------------------- messages <-> frames


def pack(header: dict, blobs: list[bytes]) -> bytes:
    head = json.dumps({**header, "blobs": [len(b) for b in blobs]}).encode()
    body = struct.pack(">I", len(head)) + head + b"".join(blobs)
    return struct.pack(">Q", len(body)) + body


def unpack(body: bytes) -> tuple[dict, list[bytes]]:
    if len(body) < 4:
        raise ChannelError("a message too short to read")
    (head_len,) = struct.unpack(">I", body[:4])
    if head_len > len(body) - 4:
        raise ChannelError("a message whose header runs past its end")
    if head_len > MAX_HEADER_BYTES:
        raise ChannelError(f"a message whose header is larger than the {MAX_HEADER_BYTES} bytes allowed")
    try:
        header = json.loads(body[4:4 + head_len])
    except (ValueError, UnicodeDecodeError):
        raise ChannelError("a message whose header is not JSON") from None
    except RecursionError:  # JSON nested thousands deep: the parser's own recursion limit
        raise ChannelError("a message whose header is nested too deeply") from None
    if type(header) is not dict:
        raise ChannelError("a message whose header is not an object")
    sizes = header.pop("blobs", [])
    if type(sizes) is not list or not all(type(s) is int and s >= 0 for s in sizes):
        raise ChannelError("a message with malformed blob sizes")
    if 4 + head_len + sum(sizes) != len(body):
        raise ChannelError("a message whose blobs do not add up")
    blobs, at = [], 4 + head_len
    for size in sizes:
        blobs.append(body[at:at + size])
        at += size
    return header, blobs


def _wait(fd: int, for_writing: bool, deadline: float | None, patience) -> None:
    """Wait until `fd` can be read (or written), until `deadline`, asking `patience()` (which
    raises ChannelTimeout when the wait should end: a CPU-time limit, say) every TICK seconds."""
    while True:
        wait = None if deadline is None and patience is None else TICK
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelTimeout("the other side stopped reading" if for_writing else "no answer in time")
            wait = min(wait, left)
        ready = select.select([], [fd], [], wait)[1] if for_writing else select.select([fd], [], [], wait)[0]
        if ready:
            return
        if patience is not None:
            patience()


def send(fd: int, header: dict, blobs: list[bytes], deadline: float | None = None, patience=None) -> None:
    data = memoryview(pack(header, blobs))
    while data:
        if deadline is not None or patience is not None:
            _wait(fd, True, deadline, patience)
        try:
            written = os.write(fd, data[: 1 << 16])
        except BlockingIOError:
            continue
        except (BrokenPipeError, OSError):
            raise ChannelClosed("the other side has gone") from None
        data = data[written:]


def _read_exactly(fd: int, size: int, deadline: float | None, patience=None) -> bytes:
    chunks, left = [], size
    while left:
        if deadline is not None or patience is not None:
            _wait(fd, False, deadline, patience)
        try:
            chunk = os.read(fd, min(left, 1 << 20))
        except BlockingIOError:
            continue
        except OSError:
            raise ChannelClosed("the other side has gone") from None
        if not chunk:
            raise ChannelClosed("the other side has gone")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd: int, deadline: float | None = None, patience=None) -> tuple[dict, list[bytes]]:
    (size,) = struct.unpack(">Q", _read_exactly(fd, 8, deadline, patience))
    if size > MAX_MESSAGE_BYTES:
        raise ChannelError(f"a message of {size} bytes is larger than the {MAX_MESSAGE_BYTES} allowed")
    return unpack(_read_exactly(fd, size, deadline, patience))
