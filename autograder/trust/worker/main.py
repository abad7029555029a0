"""The sandboxed worker: runs one submission's code and answers the grader's requests.

Started by the grader (`autograder/trust/student.py`) inside the sandbox, as
`python -I main.py REQUEST_FD REPLY_FD`. It reads requests from one pipe and writes
replies to the other, in the format of `channel.py`:

    hello    (sent once, unasked, before anything else runs: the worker is up)
    prepare  import modules the grader's checks will need, before any timed call
    exec     run one code cell of the submission in the notebook's namespace
    describe what a name is: missing, a function, a class, or some other type
    call     call a function, a method of a held object, or a held object itself;
             the result comes back as data, or stays here as a held object (`keep`)
    getattr  read an attribute of a held object (a dotted path: "blocks.0.training")
    grads    the gradients of a held module's parameters, by name
    record   hold a plain record of the grader's fields (a configuration)
    remote_model  hold a course GPT whose every layer the grader computes (see `remote_gpt`)
    release  forget held objects

While a call runs, the contract functions named in `stubs` are replaced in the namespace
by stubs that ask the grader to run its reference instead (a `callback` message), and a
function handed over as an argument (a `Ref`) does the same (a `torch.Generator` argument
crosses as its state, and comes back advanced); `library_stubs` stand in a
library's function (torch's GELU, say) where a gradient must flow through the call. A call whose
target says `"clock": "virtual"` (a timer's) runs on a clock the grader moves (`virtual_clock.py`:
the reply to a callback says how long that call took, and time.sleep moves the clock instead of
sleeping), installed for that call alone and put back after it. Everything the student's
code prints goes to /dev/null; a call that runs past its time is interrupted here, and the
grader kills the whole sandbox if that does not work. Time limits count CPU time (the
grader reads the worker's from /proc; the worker's own alarm is a courtesy that saves a
restart), so a busy machine does not make a correct answer late. Every reply carries the
id of the request it answers.

This process is the student's: nothing it says is trusted. The grader checks every
answer's type and shape itself, and kills and replaces the worker when it misbehaves.
"""

from __future__ import annotations

import linecache
import os
import signal
import sys
import traceback

if __name__ == "__main__":  # inside the sandbox this file sits beside channel.py (-I leaves it off sys.path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    # The course folder the grader shows (its coursekit/), before anything the environment's own
    # install of coursekit points at: -I ignores PYTHONPATH, so it is read here (sandbox.py).
    for _folder in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
        sys.path.insert(1, _folder)
    import channel
    import virtual_clock  # before any student code: it takes the real clocks as they are now

else:  # imported as autograder.worker.main (by tools that read the course tree)
    from . import channel, virtual_clock


def callback_error(reply: dict, name: str) -> Exception:
    """The exception a failed call of the grader's function raises in the student's code: the
    same built-in type the reference raised (a ValueError stays a ValueError, as it would in
    the student's own notebook), else a RuntimeError."""
    import builtins

    message = str(reply.get("error", f"{name} failed"))
    kind = getattr(builtins, str(reply.get("type", "")), None)
    if isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(kind, Warning):
        try:
            return kind(message)
        except Exception:  # noqa: BLE001 - a built-in that wants other arguments (UnicodeError...)
            pass
    return RuntimeError(f"{reply['type']}: {message}" if reply.get("type") else message)


class TimeLimitExceeded(BaseException):
    """A BaseException, so a student's `except Exception:` does not swallow it."""


def error_text(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    text = text if len(text) <= 300 else text[:297] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def where_in_student_code(err: BaseException) -> str | None:
    """The last line of the student's own code in a traceback: `<cell label>, line N`."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename.startswith("<cell ")]
    if not frames:
        return None
    frame = frames[-1]
    line = (frame.line or "").strip()  # the cells' sources are in linecache (op_exec)
    line = line if len(line) <= 120 else line[:117] + "..."
    return f"{frame.filename[6:-1]}, line {frame.lineno}" + (f": `{line}`" if line else "")


class Worker:
    def __init__(self, request_fd: int, reply_fd: int):
        self.request_fd, self.reply_fd = request_fd, reply_fd
        self.rid = None  # the id of the request being answered, echoed in every reply
        self.namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
        self.held: dict[int, object] = {}
        self.next_id = 1
        self.clock = None  # the virtual clock of the call running on one (see op_call)

    # ------------------------------------------------------------ wire

    def send(self, header: dict, blobs: list[bytes] | None = None) -> None:
        channel.send(self.reply_fd, {**header, "rid": self.rid}, blobs or [])

    def receive(self):
        return channel.receive(self.request_fd)

    def hold(self, value) -> channel.Ref:
        ident = self.next_id
        self.next_id += 1
        self.held[ident] = value
        return channel.Ref("obj", ident)

    def encode_reply(self, header: dict, values: dict, keep: bool = False) -> None:
        blobs: list[bytes] = []
        types: dict[str, str] = {}

        def as_ref(value):
            ref = self.hold(value)
            types[str(ref.id)] = f"{type(value).__module__}.{type(value).__qualname__}"
            return ref

        body = {key: channel.encode(as_ref(value) if keep and key == "value" else value, blobs, as_ref)
                for key, value in values.items()}
        self.send({**header, **body, "types": types}, blobs)

    def decode_args(self, header, blobs):
        args = channel.decode(header.get("args", {"t": "tuple", "v": []}), blobs)
        kwargs = channel.decode(header.get("kwargs", {"t": "dict", "k": [], "v": []}), blobs)
        return self.resolve(args), self.resolve(kwargs)

    def resolve(self, value):
        """Refs from the grader: `fn` becomes a stub that calls back, `obj` the held object."""
        if isinstance(value, channel.Ref):
            if value.kind == "fn":
                return self.stub(value.id, f"function #{value.id}")
            return self.held[value.id]
        if type(value) in (tuple, list):
            return type(value)(self.resolve(v) for v in value)
        if type(value) is dict:
            return {k: self.resolve(v) for k, v in value.items()}
        return value

    def stub(self, key, name: str):
        worker = self

        def call_grader(*args, **kwargs):
            blobs: list[bytes] = []
            generators: list = []
            args = tuple(lift_generator(a, generators) for a in args)
            kwargs = {k: lift_generator(v, generators) for k, v in kwargs.items()}
            try:
                header = {
                    "op": "callback", "fn": key,
                    "args": channel.encode(tuple(args), blobs), "kwargs": channel.encode(dict(kwargs), blobs),
                }
            except channel.ChannelError as err:
                raise TypeError(f"{name} was given a value it cannot take: {err}") from None
            worker.send(header, blobs)
            reply, reply_blobs = worker.receive()
            if not reply.get("ok"):
                raise callback_error(reply, name)
            if reply.get("advance") is not None and worker.clock is not None:
                worker.clock.advance(reply["advance"])  # how long the grader's function says its call took
            states = channel.decode(reply.get("generator_states", {"t": "list", "v": []}), reply_blobs)
            for generator, state in zip(generators, states, strict=False):
                generator.set_state(state)  # advanced as far as the reference advanced it
            return channel.decode(reply["value"], reply_blobs)

        call_grader.__name__ = call_grader.__qualname__ = name
        return call_grader

    # ------------------------------------------------------------ time limits

    def arm(self, seconds: float) -> None:
        """Interrupt the student's code after `seconds` of CPU time (this process, all threads)."""
        def interrupt(signum, frame):
            raise TimeLimitExceeded(seconds)

        signal.signal(signal.SIGPROF, interrupt)
        signal.setitimer(signal.ITIMER_PROF, seconds, 0.25)

    def disarm(self) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0)

    # ------------------------------------------------------------ requests

    def run(self) -> None:
        self.send({"op": "hello"})
        while True:
            header, blobs = self.receive()
            self.rid = header.get("rid")
            op = header.get("op")
            handler = getattr(self, f"op_{op}", None)
            if handler is None:
                self.send({"ok": False, "error": f"unknown request {op!r}"})
                continue
            handler(header, blobs)

    def op_prepare(self, header, blobs):
        """Import what the checks will use (torch._dynamo, which an optimizer's first step
        imports, takes a second): a timed call interrupted in the middle of an import would
        leave a half-made module behind for every later call."""
        import importlib

        for name in header.get("imports", []):
            try:
                importlib.import_module(str(name))
            except Exception:  # noqa: BLE001 - the check that needs it will say what is wrong
                pass
        self.send({"ok": True})

    def op_exec(self, header, blobs):
        label, source = str(header["label"]), str(header["source"])
        try:
            code = compile(source, f"<cell {label}>", "exec", dont_inherit=True)  # not this file's __future__
            # Its lines, for a traceback to quote the line that raised (where_in_student_code)
            linecache.cache[f"<cell {label}>"] = (len(source), None, source.splitlines(True), f"<cell {label}>")
        except SyntaxError as err:
            self.send({"ok": False, "error": f"SyntaxError: {err.msg} (line {err.lineno})"})
            return
        try:
            self.arm(float(header.get("seconds", 30)))
            exec(code, self.namespace)
        except TimeLimitExceeded:
            self.disarm()
            self.send({"ok": False, "timed_out": True, "error": "still running when its time was up"})
            return
        except BaseException as err:  # noqa: BLE001 - a student's cell may raise anything
            self.disarm()
            self.send({"ok": False, "error": error_text(err)})
            return
        self.disarm()
        self.send({"ok": True})

    def op_describe(self, header, blobs):
        value = self.namespace.get(str(header["name"]), _MISSING)
        if value is _MISSING:
            kind = "missing"
        elif isinstance(value, type):
            kind = "class"
        elif callable(value):
            kind = "function"
        else:
            kind = type(value).__name__
        self.send({"ok": True, "kind": str(kind)})

    def op_call(self, header, blobs):
        swapped = {}
        forbidden = []
        clock = None
        failure = None
        args = kwargs = None
        try:
            args, kwargs = self.decode_args(header, blobs)
            target = header["target"]
            if "make" in target:  # a course object the grader asks for: coursekit's model, a Generator
                fn = trusted_factory(str(target["make"]))
            elif "handle" in target:
                obj = self.held[int(target["handle"])]
                method = target.get("method")
                fn = obj if method is None else getattr(obj, str(method))
            else:
                fn = self.namespace[str(target["name"])]
            for name in header.get("stubs", []):
                swapped[name] = self.namespace.get(name, _MISSING)
                self.namespace[name] = self.stub(("ref", name), f"the reference {name}")
            for name, dotted in header.get("library_stubs", {}).items():
                # A library function standing in for a contract function inside a module,
                # where a call back to the grader would cut the autograd graph.
                swapped[name] = self.namespace.get(name, _MISSING)
                self.namespace[name] = called_as_own(library_function(str(dotted), header.get("stand_ins")),
                                                     swapped[name])
            forbidden = forbid(header.get("forbid", []))
            upstream = channel.decode(header["backward"], blobs) if "backward" in header else None
            if target.get("clock") == "virtual":  # a timer, timed on a clock the grader moves (virtual_clock.py)
                clock = self.clock = virtual_clock.VirtualClock()
                clock.install((self.namespace,), (fn,))
            self.arm(float(header.get("seconds", 5)))
            try:
                result = fn(*args, **kwargs)
                if upstream is not None:  # a gradient check: backpropagate `upstream` from the result
                    result.backward(upstream)
            finally:
                self.disarm()
        except TimeLimitExceeded:
            self.send({"ok": False, "timed_out": True, "error": "did not finish in time"})
            return
        except BaseException as err:  # noqa: BLE001 - student code may raise anything
            failure = {"ok": False, "error": error_text(err), "type": type(err).__name__,
                       "where": where_in_student_code(err)}
            if header.get("return_args") and args is not None:  # the inputs as the failed call left them
                failure["after"] = (args, kwargs)
            else:
                self.send(failure)
                return
        finally:
            if clock is not None:  # before the stubs: it was installed after them
                clock.uninstall()
                self.clock = None
            for name, value in swapped.items():
                if value is _MISSING:
                    self.namespace.pop(name, None)
                else:
                    self.namespace[name] = value
            unforbid(forbidden)
        if failure is not None:
            self.reply_failure(failure)
            return
        values = {"value": result}
        if "backward" in header:
            values["arg_grads"] = [getattr(a, "grad", None) for a in args]
        if header.get("return_args"):
            values["args_after"] = args
            values["kwargs_after"] = kwargs
        self.reply_values(values, keep=bool(header.get("keep")))

    def reply_failure(self, failure: dict) -> None:
        """An exception, with the arguments as the call left them (for an inputs-unchanged check)."""
        args, kwargs = failure.pop("after")
        try:
            self.arm(30.0)
            self.encode_reply(failure, {"args_after": args, "kwargs_after": kwargs})
        except BaseException:  # noqa: BLE001 - unsendable arguments: the failure alone
            self.send(failure)
        finally:
            self.disarm()

    def reply_values(self, values: dict, keep: bool = False) -> None:
        try:
            self.arm(30.0)  # encoding may run the student's code (an ndarray subclass, say)
            self.encode_reply({"ok": True}, values, keep)
        except channel.ChannelError as err:
            self.send({"ok": False, "unsendable": True, "error": str(err)})
        except BaseException as err:  # noqa: BLE001
            self.send({"ok": False, "unsendable": True, "error": error_text(err)})
        finally:
            self.disarm()

    def op_getattr(self, header, blobs):
        try:
            value = self.held[int(header["handle"])]
            for name in str(header["attr"]).split("."):
                value = getattr(value, name)
        except BaseException as err:  # noqa: BLE001
            self.send({"ok": False, "error": error_text(err)})
            return
        self.reply_values({"value": value})

    def op_grads(self, header, blobs):
        """The `.grad` of every named parameter of a held module (None where there is none)."""
        try:
            module = self.held[int(header["handle"])]
            grads = {name: p.grad for name, p in module.named_parameters()}
        except BaseException as err:  # noqa: BLE001
            self.send({"ok": False, "error": error_text(err)})
            return
        self.reply_values({"value": grads})

    def op_record(self, header, blobs):
        """Hold a plain record (types.SimpleNamespace) of the given fields: a configuration
        the grader makes, so that a part is not graded through the student's own config class."""
        import types

        try:
            fields = channel.decode(header["fields"], blobs)
            record = types.SimpleNamespace(**fields)
        except (channel.ChannelError, TypeError) as err:
            self.send({"ok": False, "error": error_text(err)})
            return
        self.reply_values({"value": record}, keep=True)

    def op_remote_model(self, header, blobs):
        """Hold a course GPT whose layers are computed by the grader (see `remote_gpt`)."""
        try:
            fields = channel.decode(header["fields"], blobs)
            key = ["remote", int(header["key"])]
            model = remote_gpt(dict(fields), self.stub(key, "the course's model"),
                               autograd=bool(header.get("autograd")))
        except BaseException as err:  # noqa: BLE001
            self.send({"ok": False, "error": error_text(err)})
            return
        self.reply_values({"value": model}, keep=True)

    def op_release(self, header, blobs):
        for ident in header.get("handles", []):
            self.held.pop(int(ident), None)
        self.send({"ok": True})


_MISSING = object()
TRUSTED_FACTORIES = ("coursekit.", "torch.Generator", "torch.manual_seed")


def trusted_factory(dotted: str):
    """A course class or torch.Generator, by name: the only things the grader builds here
    that are not the student's, and torch.manual_seed, so that a check that builds a student's
    model gets the same random weights every time. Anything else is refused."""
    if not dotted.startswith(TRUSTED_FACTORIES) or dotted.count(".") > 3:
        raise PermissionError(f"the grader may not build {dotted!r} here")
    return library_function(dotted)


def remote_gpt(fields: dict, ask, autograd: bool = False):
    """The course's GPT (`coursekit.gpt.GPT`) as a shell whose layers run in the grader.

    Every embedding, linear layer and layer norm is a `RemoteLeaf`: calling it asks the grader,
    which holds the real weights, to compute that layer on the given input (and sees the call).
    The shell keeps the model's structure and attributes (config, blocks, n_heads, training
    flags), so a student's code drives it as it would the real one, and its parameters have
    the real shapes and dtypes, but hold NaN: nothing computed from them is right, so no answer
    can come from here without the grader seeing the calls that made it. (An embedding's rows read
    from its weight are the one exception, and a call too: see `LookupTable`.)

    With `autograd`, a layer's output is linked to its input and parameters in this process's
    autograd graph, as a real layer's is: with grad mode on, the layer keeps its input for a
    backward pass, and so do the operations between layers (a GELU, attention), all of it held
    until the graph is freed, which is what a kept graph costs a real model. (A backward pass
    stops at the layers: their parameters' gradients would be the grader's to compute.) Only for
    a check that measures that memory: a generation that kept its graphs alive in a KV cache
    would hold them all.
    """
    import types

    import torch
    from torch import nn

    from coursekit.gpt import GPT

    class Linked(torch.autograd.Function):
        @staticmethod
        def forward(ctx, name, training, x, *params):
            ctx.save_for_backward(x)  # as a real linear layer keeps its input for its weight's gradient
            ctx.count = len(params)
            return ask(name, x, training)

        @staticmethod
        def backward(ctx, grad):
            return (None, None, None, *([None] * ctx.count))

    class LookupTable(nn.Parameter):
        """An embedding's weight in the shell: NaN for any use but one. Its rows read by index
        (`weight[pos]`, `weight[:T]`, `weight[start:end, :]`, `weight[ids]`) or by
        `F.embedding(ids, weight)` are asked of the grader as the embedding's own call would ask
        them: the leaf is called on the row ids as a LongTensor (`torch.arange(n)[key]`: a 0-dim
        tensor for an int, as `pos_emb(torch.tensor(pos))`), so the grader sees the same lookup
        and grades it alike. Every other operation gives plain tensors (NaN)."""

        leaf = None  # the RemoteLeaf it belongs to (none in a copy: then it is NaN like the rest)

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            table, ids = None, None
            if func is torch.Tensor.__getitem__ and type(args[0]) is cls:
                table, key = args[0], args[1]
                if isinstance(key, tuple) and key and all(k is Ellipsis or (type(k) is slice and k.start is None
                                                                             and k.stop is None and k.step is None)
                                                          for k in key[1:]):
                    key = key[0]  # weight[rows, :] and weight[rows, ...] read rows too
                if isinstance(key, slice) or (isinstance(key, int) and not isinstance(key, bool)) or (
                        isinstance(key, torch.Tensor) and not key.is_floating_point() and key.dtype != torch.bool):
                    with torch._C.DisableTorchFunctionSubclass():
                        ids = torch.arange(table.shape[0])[key]
            elif func is torch.nn.functional.embedding and len(args) == 2 and type(args[1]) is cls \
                    and kwargs.get("padding_idx") is None and kwargs.get("max_norm") is None:
                table, ids = args[1], args[0]
            if ids is not None and table.leaf is not None:
                return table.leaf(ids)
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)

    class RemoteLeaf(nn.Module):
        def __init__(self, name: str, original: nn.Module):
            super().__init__()
            self.remote_name = name
            table = LookupTable if isinstance(original, nn.Embedding) else nn.Parameter
            for pname, param in original.named_parameters(recurse=False):
                self.register_parameter(pname, table(torch.full_like(param, float("nan")),
                                                     requires_grad=param.requires_grad))
                if table is LookupTable:
                    getattr(self, pname).leaf = self
            for attr in ("num_embeddings", "embedding_dim", "in_features", "out_features", "normalized_shape",
                         "eps", "padding_idx", "elementwise_affine"):
                if hasattr(original, attr):
                    setattr(self, attr, getattr(original, attr))

        def forward(self, x):
            if autograd and isinstance(x, torch.Tensor):
                return Linked.apply(self.remote_name, self.training, x, *self.parameters())
            return ask(self.remote_name, x, self.training)

        def extra_repr(self):
            return f"computed by the grader: {self.remote_name}"

    model = GPT(types.SimpleNamespace(**fields))
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.Linear | nn.Embedding | nn.LayerNorm):
            parent_name, _, attr = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            parent._modules[attr] = RemoteLeaf(name, module)
    if fields.get("tie_weights"):
        model.lm_head.weight = model.token_emb.weight  # one parameter, as in the real model
    return model


def lift_generator(value, generators: list):
    """A torch.Generator cannot cross as data; its state can."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Generator):
        generators.append(value)
        return {"__generator_state__": value.get_state()}
    return value


class ForbiddenShortcut(Exception):
    pass


STAND_INS = "autograder.trust.worker.stand_ins"  # its source comes with the call (student.py), never as a file


def library_function(dotted: str, stand_ins_source: str | None = None):
    import importlib

    module_name, attr = dotted.rsplit(".", 1)
    if module_name == STAND_INS and stand_ins_source is not None and not __package__:
        # In the sandbox stand_ins.py is no file: the grader sends its source with the call that
        # needs it (student.py), run here as a module under no name in sys.modules.
        import types

        module = types.ModuleType("_stand_ins")
        exec(compile(stand_ins_source, "<stand_ins>", "exec"), module.__dict__)  # noqa: S102 - the grader's code
        return getattr(module, attr)
    return getattr(importlib.import_module(module_name), attr)


def called_as_own(library, own):
    """The library's class standing in for the student's own class `own`, called as the student's
    code calls its own: a nanoGPT-style `MultiHeadAttention(d_model, n_heads, dropout=0.0)` must
    not cost a correct block its points because the stand-in takes only the contract's
    `(d_model, n_heads)`. A call the library's signature takes goes through unchanged; another is
    bound to the student's own signature, and the library gets the contract's arguments from it:
    by name where the student kept the contract's names, else by position (the contract fixes
    their order). Arguments beyond the contract's (dropout, bias flags) are left out: the stand-in
    is the reference's layer whatever they say."""
    import inspect

    if not (isinstance(library, type) and isinstance(own, type)):
        return library
    try:
        theirs, ours = inspect.signature(own), inspect.signature(library)
    except (TypeError, ValueError):
        return library
    ordered = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    contract = [p.name for p in ours.parameters.values() if p.kind in ordered]

    def contract_arguments(args, kwargs):
        try:
            ours.bind(*args, **kwargs)
            return args, kwargs
        except TypeError:
            pass
        try:
            bound = theirs.bind(*args, **kwargs)
        except TypeError:
            return args, kwargs  # not even the student's own class takes it: the library says why
        bound.apply_defaults()
        given, in_order = {}, []
        for name, value in bound.arguments.items():
            kind = theirs.parameters[name].kind
            if kind == inspect.Parameter.VAR_KEYWORD:
                given.update(value)
            elif kind != inspect.Parameter.VAR_POSITIONAL:
                given[name] = value
                in_order.append(value)
        if all(name in given for name in contract if ours.parameters[name].default is inspect.Parameter.empty):
            return (), {name: given[name] for name in contract if name in given}
        return tuple(in_order[:len(contract)]), {}

    class StandIn(library):
        def __init__(self, *args, **kwargs):
            args, kwargs = contract_arguments(args, kwargs)
            super().__init__(*args, **kwargs)

    StandIn.__name__, StandIn.__qualname__ = library.__name__, library.__qualname__
    StandIn.__module__ = library.__module__
    return StandIn


def forbid(names) -> list:
    """Library shortcuts an exercise asks the student to write themselves raise while the
    call runs. A teaching rule, not a defence: the grader does not rely on it.

    A library the submission has not imported is not imported for this (torch would cost a
    NumPy unit's worker a second and a half per notebook): if the call imports it, the
    shortcut is replaced as soon as its module has run. Returns what `unforbid` undoes."""
    import importlib

    undo: list = []
    later: dict[str, list[str]] = {}
    for dotted in names:
        module_name, attr = str(dotted).rsplit(".", 1)
        if module_name.split(".")[0] not in sys.modules:
            later.setdefault(module_name, []).append(attr)
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            # A method of a class ("torch.Tensor.log_softmax"): refuse it on the class.
            owner, _, cls = module_name.rpartition(".")
            try:
                module = getattr(importlib.import_module(owner), cls)
            except (ImportError, AttributeError, ValueError):
                continue
        _refuse(module, attr, undo, name=str(dotted))
    if later:
        finder = _RefuseOnImport(later, undo)
        sys.meta_path.insert(0, finder)
        undo.append(lambda: sys.meta_path.remove(finder) if finder in sys.meta_path else None)
    return undo


def _refuse(module, attr: str, undo: list, name: str | None = None) -> None:
    try:
        original = getattr(module, attr)
    except AttributeError:
        return
    name = name or f"{module.__name__}.{attr}"

    def refuse(*args, **kwargs):
        raise ForbiddenShortcut(f"{name} is off limits in this part of the exercise: do its work yourself")

    own = attr in vars(module)  # a class's inherited method is undone by deleting the stand-in
    setattr(module, attr, refuse)
    undo.append(lambda: setattr(module, attr, original) if own else delattr(module, attr))


class _RefuseOnImport:
    """A meta path finder for the modules `forbid` is waiting for: the first time one is
    imported, its loader is wrapped so the shortcuts are replaced right after it runs."""

    def __init__(self, waiting: dict[str, list[str]], undo: list):
        self.waiting, self.undo = waiting, undo

    def find_spec(self, fullname, path=None, target=None):
        attrs = self.waiting.pop(fullname, None)
        if attrs is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenRefuse(spec.loader, attrs, self.undo)
        return spec


class _ThenRefuse:
    """A loader that runs the real one, then replaces the module's shortcuts."""

    def __init__(self, loader, attrs: list[str], undo: list):
        self.loader, self.attrs, self.undo = loader, attrs, undo

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        for attr in self.attrs:
            _refuse(module, attr, self.undo)

    def __getattr__(self, name):  # get_source, is_package, ...: the real loader's
        return getattr(self.loader, name)


def unforbid(undo) -> None:
    for step in reversed(undo):
        step()


def serve(request_fd: int, reply_fd: int) -> int:
    """Answer the grader's requests on these pipes until it closes them."""
    import warnings

    warnings.simplefilter("ignore")
    try:
        import numpy as np

        np.seterr(all="ignore")
    except ImportError:  # pragma: no cover - numpy is always installed with the course
        pass
    worker = Worker(request_fd, reply_fd)
    try:
        worker.run()
    except (channel.ChannelClosed, KeyboardInterrupt):
        return 0
    return 0


def main(argv: list[str]) -> int:
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the student's prints go nowhere, from Python or from C
        os.dup2(devnull, fd)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    if argv[1] == "--zygote":  # forks a worker for each submission instead (zygote.py)
        import zygote

        return zygote.main(argv[2:], serve)
    return serve(int(argv[1]), int(argv[2]))


if __name__ == "__main__":
    os._exit(main(sys.argv))
