"""The grader's side of the trust line: a submission's code, running in a sandboxed worker.

`Submission.open(path)` reads a notebook or `.py` file (as data: the grader never runs it)
and starts a worker (`autograder/worker/main.py`) in the sandbox, which runs the code
cells one by one. Then `student.call("softmax", x)` sends `x` across, the worker calls
the student's `softmax`, and what comes back is data decoded without running anything:
arrays, tensors, numbers, strings, and tuples, lists and dicts of them. A class stays in
the worker: `student.new("Block", 16, 4)` returns a `Handle`, and `handle.call(x)`,
`handle.method("load_state_dict", sd)`, `handle.attr("weight")` drive it from here.

Every request has a deadline. A worker that misses one, dies, or answers garbage is
killed (with everything it started) and replaced by a fresh one that runs the
submission's cells again, skipping any cell that never finished.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .sandbox import Limits, SandboxedProcess, TimeLimitExceeded, quiet, sandbox_problem, time_limit
from .submission import code_cells
from .worker import channel

WORKER_DIR = Path(__file__).resolve().parent / "worker"
CELL_SECONDS = 30.0  # nbgrader's own per-cell timeout
GRACE_SECONDS = 3.0  # the worker's own alarm should stop a call; this long after, we kill it
MAX_RESTARTS = 20


# ---------------------------------------------------------------- what a call gives back


@dataclass
class Outcome:
    """What one call of student code came to: a value, an error, or a timeout."""

    value: object = None
    error: str | None = None  # "ValueError: shapes do not match"
    error_type: str | None = None  # "ValueError"
    where: str | None = None  # "softmax, line 4": the student's line that raised
    timed_out: bool = False
    args_after: tuple = ()
    kwargs_after: dict = field(default_factory=dict)
    arg_grads: list = field(default_factory=list)  # with `backward`: each argument's .grad
    census: list = field(default_factory=list)  # with `census`: [[shape, count], ...] of tensors created

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out


class Handle:
    """An object that lives in the worker (a student's `nn.Module`, say)."""

    def __init__(self, student: Student, ident: int, type_name: str, generation: int):
        self.student, self.id, self.type_name, self.generation = student, ident, type_name, generation

    def __repr__(self):
        return f"<{self.type_name} in the student's worker>"

    def call(self, *args, seconds: float | None = None, keep: bool = False, stubs: dict | None = None,
             forbid: tuple = (), backward=None, **kwargs) -> Outcome:
        return self.student._call({"handle": self.id}, args, kwargs, seconds=seconds, keep=keep, handle=self,
                                  stubs=stubs, forbid=forbid, backward=backward)

    def method(self, name: str, *args, seconds: float | None = None, keep: bool = False, stubs: dict | None = None,
               forbid: tuple = (), **kwargs) -> Outcome:
        return self.student._call({"handle": self.id, "method": name}, args, kwargs, seconds=seconds,
                                  keep=keep, handle=self, stubs=stubs, forbid=forbid)

    def attr(self, name: str) -> Outcome:
        return self.student._getattr(self, name)

    def grads(self) -> Outcome:
        """{parameter name: its .grad tensor, or None} of a module."""
        return self.student._simple(self, {"op": "grads", "handle": self.id})

    def watch(self, modules: dict) -> Outcome:
        """Record the calls of these submodules from now on (worker/main.py: install_watch)."""
        return self.student._simple(self, {"op": "watch", "handle": self.id, "modules": dict(modules)})

    def watched(self) -> Outcome:
        """The records since `watch`, as a list of dicts; recording stops."""
        return self.student._simple(self, {"op": "watched", "handle": self.id})


class Unsendable:
    """A result that cannot cross as data (a generator, an object of the student's own)."""

    def __init__(self, what: str):
        self.what = what

    def __repr__(self):
        return f"<{self.what}>"


# ---------------------------------------------------------------- the worker


class WorkerFailed(Exception):
    pass


class Student:
    """A submission's code, running in a sandboxed worker; see the module docstring."""

    def __init__(self, cells: list[tuple[str, str]], *, limits: Limits | None = None,
                 call_seconds: float = 5.0, cell_seconds: float = CELL_SECONDS):
        self.cells = cells
        self.limits = limits or Limits()
        self.call_seconds = call_seconds
        self.cell_seconds = cell_seconds
        self.notes: list[str] = []  # what went wrong while loading, for people
        self.skipped: set[int] = set()  # cells that never finished: not run again
        self.process: SandboxedProcess | None = None
        self.generation = 0  # bumped at every restart: older handles are void
        self.restarts = 0
        self.callbacks: dict = {}

    @classmethod
    def open(cls, path: str | Path, **kwargs) -> Student:
        student = cls(code_cells(path), **kwargs)
        student.start()
        return student

    # ------------------------------------------------------------ life cycle

    def start(self) -> None:
        self.close()
        self.generation += 1
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        try:
            # Inside the sandbox the worker sees its two files and nothing else of autograder/.
            script = "/opt/grader-worker/main.py" if sandbox_problem() is None else str(WORKER_DIR / "main.py")
            mounts = tuple((str(WORKER_DIR / name), f"/opt/grader-worker/{name}") for name in ("main.py", "channel.py"))
            argv = [sys.executable, "-I", "-B", script, str(request_r), str(reply_w)]
            self.process = SandboxedProcess(argv, limits=self.limits, pass_fds=(request_r, reply_w), mounts=mounts)
        finally:
            os.close(request_r)
            os.close(reply_w)
        self.request_fd, self.reply_fd = request_w, reply_r
        os.set_blocking(self.request_fd, False)
        os.set_blocking(self.reply_fd, False)
        self._load()

    def _load(self) -> None:
        for index, (label, source) in enumerate(self.cells):
            if index in self.skipped:
                continue
            try:
                reply, _ = self._request({"op": "exec", "label": label, "source": source,
                                          "seconds": self.cell_seconds}, [], self.cell_seconds + GRACE_SECONDS)
            except WorkerFailed as err:
                self.skipped.add(index)
                self._note(f"{label} {err}; it was skipped")
                self._restart_quietly()
                return
            if not reply.get("ok"):
                if reply.get("timed_out"):
                    self.skipped.add(index)
                    self._note(f"{label} was still running after {self.cell_seconds:g} s; stopped it")
                else:
                    self._note(f"{label} raised {str(reply.get('error'))[:300]}")

    def _restart_quietly(self) -> None:
        """A fresh worker that reruns the cells, skipping the ones that never finished.

        After MAX_RESTARTS the worker stays down: every later call fails at once with a
        plain message, and the remaining checks score 0 rather than take forever."""
        self.restarts += 1
        if self.restarts > MAX_RESTARTS:
            self.close()
            self._note(f"your code crashed or hung {MAX_RESTARTS} times; the remaining checks were not run")
            return
        self.start()

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process = None
            for fd in (self.request_fd, self.reply_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # ------------------------------------------------------------ requests

    def _request(self, header: dict, blobs: list[bytes], seconds: float):
        """Send one request and wait for its reply, serving callbacks meanwhile."""
        if self.process is None or not self.process.alive():
            raise WorkerFailed("stopped: the process running your code had exited")
        deadline = time.monotonic() + seconds
        try:
            channel.send(self.request_fd, header, blobs, deadline)
            while True:
                reply, reply_blobs = channel.receive(self.reply_fd, deadline)
                if reply.get("op") == "callback":
                    self._serve_callback(reply, reply_blobs, deadline)
                    continue
                return reply, reply_blobs
        except channel.ChannelTimeout:
            raise WorkerFailed(f"did not finish within {seconds:g} s") from None
        except channel.ChannelClosed:
            raise WorkerFailed("stopped: the process running your code exited (os._exit, sys.exit in a "
                               "thread, a crash or a memory limit)") from None
        except channel.ChannelError as err:
            raise WorkerFailed(f"stopped: the process running your code sent something unreadable ({err})") \
                from None

    def _serve_callback(self, header, blobs, deadline) -> None:
        key = header.get("fn")
        key = tuple(key) if isinstance(key, list) else key
        fn = self.callbacks.get(key)
        reply_blobs: list[bytes] = []
        if fn is None:
            reply = {"ok": False, "error": "no such function"}
        else:
            try:
                args = channel.decode(header.get("args"), blobs)
                kwargs = channel.decode(header.get("kwargs"), blobs)
                if type(args) is not tuple or type(kwargs) is not dict:
                    raise channel.ChannelError("malformed call")
                generators: list = []
                args = tuple(_ground_generator(a, generators) for a in args)
                kwargs = {k: _ground_generator(v, generators) for k, v in kwargs.items()}
                with quiet(), time_limit(60.0):
                    value = fn(*args, **kwargs)
                reply = {"ok": True, "value": channel.encode(value, reply_blobs),
                         "generator_states": channel.encode([g.get_state() for g in generators], reply_blobs)}
            except channel.ChannelError as err:
                reply, reply_blobs = {"ok": False, "error": f"TypeError: {err}"}, []
            except Exception as err:  # noqa: BLE001 - the reference raised on the student's arguments
                reply, reply_blobs = {"ok": False, "error": str(err)[:300], "type": type(err).__name__}, []
        channel.send(self.request_fd, reply, reply_blobs, deadline)

    def _encode_args(self, args, kwargs, blobs):
        def as_callback(value):
            if callable(value):
                key = len(self.callbacks) + 1
                self.callbacks[key] = value
                return channel.Ref("fn", key)
            if isinstance(value, Handle):
                return channel.Ref("obj", value.id)
            return None

        return (channel.encode(tuple(args), blobs, as_callback),
                channel.encode(dict(kwargs), blobs, as_callback))

    def _outcome(self, reply, blobs) -> Outcome:
        if not reply.get("ok"):
            if reply.get("unsendable"):
                return Outcome(value=Unsendable(f"a value the grader cannot read ({reply.get('error')})"))
            after = ((), {})
            if "args_after" in reply:  # a call that raised, with the inputs as it left them
                try:
                    after = (channel.decode(reply["args_after"], blobs), channel.decode(reply["kwargs_after"], blobs))
                except (channel.ChannelError, KeyError):
                    pass
            return Outcome(error=str(reply.get("error", "failed"))[:400], error_type=str(reply.get("type") or ""),
                           where=reply.get("where") if isinstance(reply.get("where"), str) else None,
                           timed_out=bool(reply.get("timed_out")), args_after=after[0], kwargs_after=after[1])
        types = reply.get("types") if isinstance(reply.get("types"), dict) else {}
        try:
            decoded = {key: self._wrap(channel.decode(reply[key], blobs), types)
                       for key in ("value", "args_after", "kwargs_after", "arg_grads", "census") if key in reply}
        except channel.ChannelError as err:
            return Outcome(value=Unsendable(f"a value the grader cannot read ({err})"))
        census = decoded.get("census", [])
        return Outcome(value=decoded.get("value"), args_after=decoded.get("args_after", ()),
                       kwargs_after=decoded.get("kwargs_after", {}), arg_grads=decoded.get("arg_grads", []),
                       census=census if isinstance(census, list) else [])

    def _wrap(self, value, types):
        """Refs to held objects become Handles; everything else is plain data already."""
        if isinstance(value, channel.Ref):
            name = str(types.get(str(value.id), "object"))[:200]
            return Handle(self, value.id, name, self.generation)
        if type(value) in (tuple, list):
            return type(value)(self._wrap(v, types) for v in value)
        if type(value) is dict:
            return {k: self._wrap(v, types) for k, v in value.items()}
        return value

    def _call(self, target: dict, args, kwargs, *, seconds: float | None = None, stubs: dict | None = None,
              forbid: tuple = (), return_args: bool = False, keep: bool = False, handle: Handle | None = None,
              backward=None, census: bool = False) -> Outcome:
        if handle is not None and handle.generation != self.generation:
            return Outcome(error="the object was lost when your code had to be restarted")
        seconds = self.call_seconds if seconds is None else seconds
        stubs = stubs or {}
        # A stub is the reference's function, called back here, or a library function's
        # dotted name, which the worker imports itself.
        library = {name: fn for name, fn in stubs.items() if isinstance(fn, str)}
        stubs = {name: fn for name, fn in stubs.items() if not isinstance(fn, str)}
        self.callbacks = {("ref", name): fn for name, fn in stubs.items()}
        blobs: list[bytes] = []
        encoded_args, encoded_kwargs = self._encode_args(args, kwargs, blobs)
        header = {"op": "call", "target": target, "args": encoded_args, "kwargs": encoded_kwargs,
                  "stubs": sorted(stubs), "library_stubs": library, "forbid": list(forbid), "seconds": seconds,
                  "return_args": return_args, "keep": keep, "census": census}
        if backward is not None:
            header["backward"] = channel.encode(backward, blobs)
        try:
            reply, reply_blobs = self._request(header, blobs, seconds + GRACE_SECONDS)
        except WorkerFailed as err:
            timed_out = "did not finish" in str(err)
            self._restart_quietly()
            return Outcome(error=str(err), timed_out=timed_out)
        finally:
            self.callbacks = {}
        return self._outcome(reply, reply_blobs)

    def _getattr(self, handle: Handle, name: str) -> Outcome:
        return self._simple(handle, {"op": "getattr", "handle": handle.id, "attr": name})

    def _simple(self, handle: Handle, header: dict) -> Outcome:
        """A request about a held object that runs no student method of our choosing."""
        if handle.generation != self.generation:
            return Outcome(error="the object was lost when your code had to be restarted")
        try:
            reply, blobs = self._request(header, [], self.call_seconds + GRACE_SECONDS)
        except WorkerFailed as err:
            self._restart_quietly()
            return Outcome(error=str(err))
        return self._outcome(reply, blobs)

    # ------------------------------------------------------------ what the tests use

    def kind(self, name: str) -> str:
        """"missing", "function", "class", or the type name of whatever `name` is."""
        return self._describe(name)[0]

    def lineage(self, name: str) -> list[str]:
        """A class's bases, "module.qualname", itself first (as the worker reports them)."""
        return self._describe(name)[1]

    def _describe(self, name: str) -> tuple[str, list[str]]:
        try:
            reply, _ = self._request({"op": "describe", "name": name}, [], 10.0)
        except WorkerFailed:
            self._restart_quietly()
            return "missing", []
        kind, lineage = reply.get("kind"), reply.get("lineage")
        lineage = [str(x) for x in lineage] if isinstance(lineage, list) else []
        return (kind if isinstance(kind, str) else "missing"), lineage

    def call(self, name: str, *args, seconds: float | None = None, stubs: dict[str, Callable] | None = None,
             forbid: tuple = (), return_args: bool = False, keep: bool = False, backward=None,
             census: bool = False, **kwargs) -> Outcome:
        """Call the student's function `name`. `stubs` maps contract names to the
        reference functions that stand in for the student's own during this call; with
        `backward`, the result is backpropagated from that gradient and each argument's
        `.grad` comes back in `arg_grads`; with `census`, the shapes of the tensors the call
        created come back in `census`."""
        return self._call({"name": name}, args, kwargs, seconds=seconds, stubs=stubs, forbid=forbid,
                          return_args=return_args, keep=keep, backward=backward, census=census)

    def record(self, **fields) -> Outcome:
        """A plain record (types.SimpleNamespace) of `fields`, held in the worker: a
        configuration that does not depend on the student's own config class."""
        blobs: list[bytes] = []
        header = {"op": "record", "fields": channel.encode(dict(fields), blobs)}
        try:
            reply, reply_blobs = self._request(header, blobs, self.call_seconds + GRACE_SECONDS)
        except WorkerFailed as err:
            self._restart_quietly()
            return Outcome(error=str(err))
        return self._outcome(reply, reply_blobs)

    def new(self, class_name: str, *args, seconds: float | None = None, stubs: dict | None = None,
            forbid: tuple = (), **kwargs) -> Outcome:
        """Construct the student's class; the outcome's value is a Handle."""
        return self._call({"name": class_name}, args, kwargs, seconds=seconds, keep=True, stubs=stubs,
                          forbid=forbid)

    def make(self, dotted: str, *args, seconds: float | None = None, **kwargs) -> Outcome:
        """Build one of the course's own objects in the worker (`coursekit.gpt.GPT`, a
        `torch.Generator`): something the student's function is handed, not the student's."""
        return self._call({"make": dotted}, args, kwargs, seconds=seconds, keep=True)


# ---------------------------------------------------------------- trusted code, for the course's own tests


class InProcessStudent:
    """The `Student` interface over trusted functions in this process.

    Only for the course's own tests of the graders, where the "submission" is a catalogued
    wrong variant or the reference itself: code the course wrote. Values still go through
    the wire format both ways, so a check sees exactly what it would see from a worker.
    Never give it a student's code.
    """

    def __init__(self, namespace: dict):
        self.namespace = namespace
        self.notes: list[str] = []

    def kind(self, name: str) -> str:
        value = self.namespace.get(name, _MISSING)
        if value is _MISSING:
            return "missing"
        if isinstance(value, type):
            return "class"
        return "function" if callable(value) else type(value).__name__

    def lineage(self, name: str) -> list[str]:
        value = self.namespace.get(name)
        return [f"{c.__module__}.{c.__qualname__}" for c in value.__mro__] if isinstance(value, type) else []

    def call(self, name: str, *args, seconds: float | None = None, stubs: dict | None = None,
             forbid: tuple = (), return_args: bool = False, keep: bool = False, backward=None,
             census: bool = False, **kwargs) -> Outcome:
        return self._run(self.namespace[name], args, kwargs, seconds=seconds, stubs=stubs, forbid=forbid,
                         return_args=return_args, keep=keep, backward=backward, census=census)

    def new(self, class_name: str, *args, seconds: float | None = None, stubs: dict | None = None,
            forbid: tuple = (), **kwargs) -> Outcome:
        return self._run(self.namespace[class_name], args, kwargs, seconds=seconds, stubs=stubs, forbid=forbid,
                         keep=True)

    def record(self, **fields) -> Outcome:
        import types

        return Outcome(value=LocalHandle(self, types.SimpleNamespace(**fields)))

    def make(self, dotted: str, *args, seconds: float | None = None, **kwargs) -> Outcome:
        from .worker.main import trusted_factory

        return self._run(trusted_factory(dotted), args, kwargs, seconds=seconds, keep=True)

    def _run(self, fn, args, kwargs, *, seconds=None, stubs=None, forbid=(), return_args=False, keep=False,
             backward=None, census=False) -> Outcome:
        import contextlib

        from .worker.main import TensorCensus, error_text, library_function, unforbid
        from .worker.main import forbid as forbid_shortcuts

        stubs = {name: library_function(v) if isinstance(v, str) else v for name, v in (stubs or {}).items()}
        args, kwargs = round_trip((tuple(args), dict(kwargs)))
        swapped = _swap_globals(fn, stubs or {})
        forbidden = forbid_shortcuts(forbid)
        counter = TensorCensus() if census else None
        try:
            with quiet(), time_limit(seconds or 5.0):
                with counter.mode() if counter is not None else contextlib.nullcontext():
                    value = fn(*args, **kwargs)
                if backward is not None:
                    value.backward(round_trip(backward))
        except TimeLimitExceeded:
            return Outcome(error="did not finish in time", timed_out=True)
        except BaseException as err:  # noqa: BLE001 - a variant may raise on purpose
            after = ((), {})
            if return_args:
                try:
                    after = round_trip((args, kwargs))
                except channel.ChannelError:
                    pass
            return Outcome(error=error_text(err), error_type=type(err).__name__, args_after=after[0],
                           kwargs_after=after[1])
        finally:
            unforbid(forbidden)
            _restore_globals(fn, swapped)
        if keep:
            return Outcome(value=LocalHandle(self, value))
        try:
            grads = round_trip([getattr(a, "grad", None) for a in args]) if backward is not None else []
            value = round_trip(value)
            after = round_trip((args, kwargs)) if return_args else ((), {})
        except channel.ChannelError as err:
            return Outcome(value=Unsendable(f"a value the grader cannot read ({err})"))
        return Outcome(value=value, args_after=after[0], kwargs_after=after[1], arg_grads=grads,
                       census=counter.largest() if counter is not None else [])

    def close(self) -> None:
        pass


class LocalHandle:
    """A `Handle` over an object of trusted code in this process (see InProcessStudent)."""

    def __init__(self, student: InProcessStudent, obj):
        self.student, self.obj = student, obj
        self.type_name = f"{type(obj).__module__}.{type(obj).__qualname__}"

    def call(self, *args, keep=False, **kwargs) -> Outcome:
        return self.student._run(self.obj, args, kwargs, keep=keep, **_options(kwargs))


    def method(self, name, *args, keep=False, **kwargs) -> Outcome:
        try:
            bound = getattr(self.obj, name)
        except AttributeError as err:
            return Outcome(error=f"AttributeError: {err}", error_type="AttributeError")
        return self.student._run(bound, args, kwargs, keep=keep, **_options(kwargs))

    def attr(self, name) -> Outcome:
        try:
            value = self.obj
            for part in name.split("."):
                value = getattr(value, part)
        except AttributeError as err:
            return Outcome(error=f"AttributeError: {err}", error_type="AttributeError")
        try:
            return Outcome(value=round_trip(value))
        except channel.ChannelError:
            return Outcome(value=LocalHandle(self.student, value))

    def grads(self) -> Outcome:
        return Outcome(value=round_trip({n: p.grad for n, p in self.obj.named_parameters()}))

    def watch(self, modules: dict) -> Outcome:
        from .worker.main import install_watch

        self.records: list = []
        self.hooks = install_watch(self.obj, modules, self.records)
        return Outcome(value=None)

    def watched(self) -> Outcome:
        for hook in getattr(self, "hooks", []):
            hook.remove()
        return Outcome(value=round_trip(list(getattr(self, "records", []))))


def _options(kwargs: dict) -> dict:
    """The grader's own options among a handle call's keyword arguments."""
    return {key: kwargs.pop(key) for key in ("seconds", "stubs", "forbid", "backward") if key in kwargs}


_MISSING = object()


def _ground_generator(value, generators: list):
    """A worker's torch.Generator arrives as {"__generator_state__": state}: rebuild it here."""
    if type(value) is dict and set(value) == {"__generator_state__"}:
        import torch

        generator = torch.Generator()
        generator.set_state(value["__generator_state__"])
        generators.append(generator)
        return generator
    return value


def round_trip(value):
    """`value` encoded and decoded as the wire would, functions passed through as they are."""
    held: list = []

    def hold(obj):
        # Functions, objects held by handles, and generators pass through as themselves.
        if isinstance(obj, LocalHandle):
            obj = obj.obj
        elif not callable(obj) and type(obj).__name__ != "Generator":
            return None
        held.append(obj)
        return channel.Ref("fn", len(held) - 1)

    blobs: list[bytes] = []
    decoded = channel.decode(channel.encode(value, blobs, hold), blobs)

    def resolve(v):
        if isinstance(v, channel.Ref):
            return held[v.id]
        if type(v) in (tuple, list):
            return type(v)(resolve(x) for x in v)
        if type(v) is dict:
            return {k: resolve(x) for k, x in v.items()}
        return v

    return resolve(decoded)


def _namespace_of(fn) -> dict | None:
    """The globals `fn` reads contract names from: a function's own, a method's function's,
    or a class's module."""
    target = getattr(fn, "__func__", fn)
    if hasattr(target, "__globals__"):
        return target.__globals__
    module = sys.modules.get(getattr(target, "__module__", None) or "")
    return vars(module) if module is not None else None


def _swap_globals(fn, stubs: dict) -> dict:
    namespace = _namespace_of(fn) if stubs else None
    if namespace is None:
        return {}
    saved = {}
    for name, value in stubs.items():
        saved[name] = namespace.get(name, _MISSING)
        namespace[name] = value
    saved["__namespace__"] = namespace
    return saved


def _restore_globals(fn, saved: dict) -> None:
    if not saved:
        return
    namespace = saved.pop("__namespace__", None)
    for name, value in saved.items():
        if value is _MISSING:
            namespace.pop(name, None)
        else:
            namespace[name] = value
