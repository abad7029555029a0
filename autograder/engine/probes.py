"""The probe API, on both sides of the trust line: a check that looks inside a function calls
its steps through `StudentApi` (the student's code, in the sandboxed worker, results as data)
or `TrustedApi` (the reference, or a catalogued variant, in this process); `call_trusted` and
`probe_trusted` run trusted code on a check's inputs, `probe_student` the student's."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trust.sandbox import quiet, time_limit
from ..trust.student import Outcome
from ..trust.watch import TensorCensus, install_watch, trusted_gpt
from .spec import Inputs


def call_trusted(fn, inputs: Inputs) -> Trusted:
    """The reference or a catalogued variant: quiet, a generous limit, errors kept."""
    try:
        with quiet(), time_limit(60.0):
            return Trusted(value=fn(*inputs.args, **inputs.kwargs))
    except BaseException as err:  # noqa: BLE001 - a variant may fail on purpose
        return Trusted(error=err)


@dataclass
class Trusted:
    value: object = None
    error: BaseException | None = None


def same_arrays(a, b) -> bool:
    """Every array (or tensor) among `a` equals the one in the same place among `b`."""

    def leaves(x):
        return list(x) if isinstance(x, tuple | list) else [x]

    def array(x):
        if hasattr(x, "detach"):  # a torch tensor
            return x.detach().cpu().numpy()
        return x if isinstance(x, np.ndarray) else None

    la, lb = leaves(a), leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb, strict=True):
        x, y = array(x), array(y)
        if x is not None and y is not None:
            if x.shape != y.shape or not np.array_equal(x, y, equal_nan=True):
                return False
        elif (x is None) != (y is None):
            return False
    return True


class ProbeFailed(Exception):
    """A step of a probe that the student's code did not get through."""

    def __init__(self, step: str, outcome: Outcome):
        super().__init__(step)
        self.step, self.outcome = step, outcome


def _describe_args(args, kwargs) -> str:
    def short(v):
        if hasattr(v, "shape"):
            return f"<{type(v).__name__} {tuple(v.shape)}>"
        text = repr(v)
        return text if len(text) <= 20 else f"<{type(v).__name__}>"

    return ", ".join([short(a) for a in args] + [f"{k}={short(v)}" for k, v in kwargs.items()])


class StudentApi:
    """A probe's view of the student's code: every step runs in the worker."""

    trusted = False  # what runs here is the student's: measure from outside, believe nothing

    def __init__(self, student, stubs: dict, forbid: tuple, seconds: float):
        self.student, self.options = student, {"stubs": stubs, "forbid": forbid, "seconds": seconds}

    def _ok(self, step: str, outcome: Outcome, backward=None):
        if not outcome.ok:
            raise ProbeFailed(step, outcome)
        return outcome.value if backward is None else (outcome.value, outcome.arg_grads)

    def call(self, name, *args, backward=None, **kwargs):
        """The function's result; with `backward`, (result, each argument's gradient)."""
        return self._ok(f"`{name}({_describe_args(args, kwargs)})`",
                        self.student.call(name, *args, backward=backward, **self.options, **kwargs), backward)

    def call_on_virtual_clock(self, name, *args, **kwargs):
        """The function's result, timed on a clock the grader moves (worker/virtual_clock.py): the
        clocks it reads stand still but for what the grader's functions among the arguments say
        their calls took (they return a `Took`), and time.sleep moves them instead of sleeping."""
        return self._ok(f"`{name}({_describe_args(args, kwargs)})`",
                        self.student.call_on_virtual_clock(name, *args, **self.options, **kwargs))

    def new(self, name, *args, **kwargs):
        return self._ok(f"`{name}({_describe_args(args, kwargs)})`",
                        self.student.new(name, *args, **self.options, **kwargs))

    def record(self, **fields):
        return self._ok("making a configuration", self.student.record(**fields))

    def forward(self, obj, *args, keep: bool = False, backward=None):
        return self._ok(f"calling the module on {_describe_args(args, {})}",
                        obj.call(*args, keep=keep, backward=backward, **self.options), backward)

    def method(self, obj, name, *args, keep: bool = False, **kwargs):
        return self._ok(f"`.{name}({_describe_args(args, kwargs)})`",
                        obj.method(name, *args, keep=keep, **self.options, **kwargs))

    def attr(self, obj, name):
        return self._ok(f"reading `.{name}`", obj.attr(name))

    def grads(self, obj):
        return self._ok("reading the parameters' gradients", obj.grads())

    def memory_call(self, name, *args, **kwargs):
        """(the function's result, its footprint: the peak memory the call added, measured by the
        grader from outside the worker; see `Student.call(measure_memory=True)`)."""
        outcome = self.student.call(name, *args, measure_memory=True, **self.options, **kwargs)
        return self._ok(f"`{name}({_describe_args(args, kwargs)})`", outcome), outcome.footprint

    def given(self, dotted, *args, **kwargs):
        """One of the course's own objects (a coursekit model, a torch.Generator), built where
        the student's code runs, to hand to the student's function."""
        return self._ok(f"building the course's `{dotted.rsplit('.', 1)[-1]}`",
                        self.student.make(dotted, *args, **kwargs))

    def remote_model(self, fields: dict, state: dict, spec: dict, autograd: bool = False):
        """The course's GPT with these weights, for the student's function to drive: its layers
        run here, in the grader, which records the calls named in `spec` (see `call_record`).
        With `autograd`, the layers' outputs are linked into the worker's autograd graph as a
        real model's are, so that a graph kept shows in the worker's memory."""
        return self._ok("building the course's GPT",
                        self.student.remote_model(fields, state, spec, autograd=autograd))

    def scratch_folder(self) -> str:
        """The folder (with its trailing slash) where the worker writes a file that `fresh_worker`
        may carry over: its private scratch folder."""
        return self.student.scratch_folder()

    def fresh_worker(self, *names: str, limit: int | None = None) -> dict:
        """Go on in a new worker for the submission, which runs its cells again as a resumed job
        would, holding the files `names` of the old worker's scratch folder (read here, never run
        or unpickled) and nothing else of it: what the student's code kept in its process is
        gone. Every handle from before is void. {name: why that file stayed behind}."""
        options = {} if limit is None else {"limit": limit}
        return self.student.fresh_worker(tuple(names), **options)

    def watched(self, obj) -> list:
        """The records of a remote model's calls, made here."""
        return self.student.remote_records(obj)

    def model_state(self, obj) -> tuple[dict, dict]:
        """(the weights, their gradients) of a remote model, as the grader holds them."""
        return self.student.remote_state(obj)


class TrustedApi:
    """The same steps on trusted code in this process: the reference, or a namespace in
    which one catalogued variant stands in for the part being graded."""

    trusted = True  # the course's own code: it may show what it does from inside

    def __init__(self, namespace: dict):
        self.namespace = namespace
        self.watches: dict = {}
        self.hooks: dict = {}

    def call(self, name, *args, backward=None, **kwargs):
        return self._backward(self.namespace[name], args, kwargs, backward)

    def call_on_virtual_clock(self, name, *args, **kwargs):
        """On a virtual clock of this process, the same the worker's is: trusted answers are exact too."""
        from ..trust.worker.virtual_clock import VirtualClock

        return VirtualClock().run(self.namespace[name], args, kwargs, namespaces=(self.namespace,))

    def new(self, name, *args, **kwargs):
        return self.namespace[name](*args, **kwargs)

    def record(self, **fields):
        import types

        return types.SimpleNamespace(**fields)

    def forward(self, obj, *args, keep: bool = False, backward=None):
        return self._backward(obj, args, {}, backward)

    @staticmethod
    def _backward(fn, args, kwargs, backward):
        value = fn(*args, **kwargs)
        if backward is None:
            return value
        value.backward(backward)
        return value, [getattr(a, "grad", None) for a in args]

    def method(self, obj, name, *args, keep: bool = False, **kwargs):
        return getattr(obj, name)(*args, **kwargs)

    def attr(self, obj, name):
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj

    def grads(self, obj):
        return {name: p.grad for name, p in obj.named_parameters()}

    def memory_call(self, name, *args, **kwargs):
        """(the result, {"census": the shapes of the tensors it created}): trusted code only."""
        counter = TensorCensus()
        with counter.mode():
            value = self.namespace[name](*args, **kwargs)
        return value, {"census": counter.largest()}

    def given(self, dotted, *args, **kwargs):
        from ..trust.worker.main import trusted_factory

        return trusted_factory(dotted)(*args, **kwargs)

    def remote_model(self, fields: dict, state: dict, spec: dict, autograd: bool = False):
        model = trusted_gpt(fields, state)  # a real model: autograd-linked as it is
        self.watches[id(model)] = records = []
        self.hooks[id(model)] = install_watch(model, spec, records)
        return model

    def watched(self, obj):
        for hook in self.hooks.pop(id(obj), []):
            hook.remove()
        return self.watches.pop(id(obj), [])

    def model_state(self, obj) -> tuple[dict, dict]:
        return obj.state_dict(), {name: p.grad for name, p in obj.named_parameters()}

    def fresh_worker(self, *names: str, limit: int | None = None) -> dict:
        """Nothing: trusted code runs here, keeps nothing a new process would lose, and writes its
        files to a real folder, where they stay."""
        return {}



def probe_student(probe, api: StudentApi, inputs: Inputs) -> Outcome:
    try:
        return Outcome(value=probe(api, inputs))
    except ProbeFailed as failed:
        outcome = failed.outcome
        if outcome.timed_out:
            return outcome
        return Outcome(error=f"{failed.step} raised {outcome.error}", error_type=outcome.error_type,
                       where=outcome.where, value=outcome.value, retry=outcome.retry)


def probe_trusted(probe, namespace: dict, inputs: Inputs) -> Trusted:
    from ..trust.student import round_trip

    def run(*args, **kwargs):
        return round_trip(probe(TrustedApi(namespace), Inputs(args, kwargs)))

    return call_trusted(run, inputs)
