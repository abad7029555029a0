"""nbgrader's grading kernel, run inside the sandbox.

`nbgrader autograde` executes each submitted notebook in an IPython kernel, and that
kernel runs whatever the student wrote. nbgrader starts it as a plain child of the grader:
it could read the hidden tests, the reference solutions, the gradebook and the other
submissions, write over them, and reach the network. Here the kernel is a
`SandboxedProcess` (see sandbox.py): a private root where the course tree shows only the
environment and coursekit, no network, its own PID namespace, and resource limits.

Three things change because of that:

- Transport. The sandbox has a network namespace of its own, so the kernel cannot listen
  on the grader's 127.0.0.1. It talks over Unix sockets (ZeroMQ's `ipc` transport) that it
  makes in the sandbox's own /tmp, a small in-memory filesystem with a size cap; the grader
  reaches them from outside through the sandbox's root, `/proc/<its init>/root/tmp/...`.
  The connection file (with the session key) is the grader's, in a private folder, shown to
  the kernel read-only. So nothing of the grader's disk is writable from the kernel, and a
  notebook that fills its /tmp fills its own sandbox only.
- Signals. The grader's child is bubblewrap, not the kernel, and bubblewrap forwards no
  signals. nbgrader interrupts a cell that runs past its timeout with SIGINT, so the
  interrupt goes to the process group inside the sandbox, where the kernel runs; every
  other way of stopping the kernel kills the whole sandbox, and with it everything the
  notebook started.
- Working folder. The kernel runs in the sandbox's private /scratch, not in the
  submission's folder (which is on the grader's disk).

One more change has nothing to do with the sandbox: a notebook that writes bytes into its
kernel's sockets can leave the grader's heartbeat thread blocked for ever, and jupyter_client
joins that thread without a timeout when the kernel is shut down, so one notebook stopped
`nbgrader autograde` for the whole class. The grader's client waits a few seconds for it,
then leaves it behind (a daemon).

`SandboxedExecute` is nbgrader's `Execute` with this kernel, and it also caps what the
notebook may accumulate in the grader's memory: per cell, and for the whole notebook,
every output and every widget (comm) message counts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, replace

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import HBChannel
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from traitlets import Callable, Instance, Integer, List, TraitError, Tuple, Type, Unicode, default, validate

from .budget import Meter
from .sandbox import CELL_SECONDS, Limits, SandboxedProcess, blocked_seconds, own_thread_clock, sandbox_problem

# One kernel runs a whole notebook, where a sandboxed worker serves a few checks: its CPU
# budget covers every cell of a long notebook (60 cells) running to the per-cell limit.
KERNEL_LIMITS = replace(Limits(), cpu_seconds=int(60 * CELL_SECONDS))

# Variables of the grader's environment that the kernel also sees (it gets a fresh
# environment, not the grader's). nbgrader sets NBGRADER_EXECUTION while autograding;
# notebooks may test it to skip slow cells.
PASSED_TO_KERNEL = ("NBGRADER_EXECUTION",)

# Inside the sandbox: where the kernel reads its connection file, and the prefix of its sockets.
CONNECTION_FILE_INSIDE = "/kernel/connection.json"
SOCKETS_INSIDE = "/tmp/kernel-ipc"  # kernel-ipc-1 ... kernel-ipc-5, in the sandbox's own /tmp


class SandboxedProvisioner(LocalProvisioner):
    """Starts the kernel as a `SandboxedProcess`, and stops and signals it there."""

    folder: str | None = None  # the grader's private folder for the connection file; kept across restarts
    sandbox: SandboxedProcess | None = None
    sockets_outside: str | None = None  # the sockets' prefix as the grader reaches them

    async def pre_launch(self, **kwargs):
        km = self.parent
        if self.folder is None:
            self.folder = tempfile.mkdtemp(prefix="grader-kernel-")  # mode 0700: the grader's alone
        km.transport = "ipc"
        # The connection file names the sockets as the kernel sees them (the grader's side
        # switches to its own view once the sandbox is up: SandboxedKernelManager).
        km.ip = SOCKETS_INSIDE if sandbox_problem() is None else os.path.join(self.folder, "kernel-ipc")
        km.connection_file = os.path.join(self.folder, "kernel.json")
        return await super().pre_launch(**kwargs)

    async def launch_kernel(self, cmd: list[str], **kwargs):
        # kwargs holds nbclient's cwd (the submission's folder) and the grader's whole
        # environment: the kernel gets neither.
        env = {name: os.environ[name] for name in PASSED_TO_KERNEL if name in os.environ}
        km = self.parent
        mounts = [tuple(m) for m in km.mounts]
        if sandbox_problem() is not None:
            # Unsandboxed, the kernel is the grader's child: let it exit if the grader dies.
            # (Sandboxed, bubblewrap's --die-with-parent does that, and the kernel's parent
            # is the sandbox's init, which this variable would mistake for an orphaning.)
            env["JPY_PARENT_PID"] = str(os.getpid())
        else:
            mounts.append((km.connection_file, CONNECTION_FILE_INSIDE))
        try:
            self.sandbox = SandboxedProcess(cmd, limits=km.limits, cwd="/scratch", env=env, mounts=tuple(mounts))
        except BaseException:
            self._remove_folder()
            raise
        self.process = self.sandbox.proc
        self.pid = self.process.pid
        self.pgid = None  # see _kernel_group: bubblewrap's own group holds only bubblewrap
        self.cwd = "/scratch"
        self.sockets_outside = (f"/proc/{self.sandbox.init_pid}/root{SOCKETS_INSIDE}" if self.sandbox.sandboxed
                                else km.ip)
        return self.connection_info

    def _kernel_group(self) -> int | None:
        """The process group of the kernel and what it started, as the grader numbers it."""
        if not self.sandbox.sandboxed:
            return self.sandbox.pid  # started in a session of its own
        # bubblewrap's child is the sandbox's init (PID 1 inside), which made a new session
        # (--new-session) and started the kernel in it. An init ignores signals it has no
        # handler for, so a SIGINT to this group reaches the kernel and its children only.
        return self.sandbox.init_pid

    async def send_signal(self, signum: int) -> None:
        if self.sandbox is None or not self.sandbox.alive():
            return
        group = self._kernel_group()
        if group is None:  # the sandbox is still starting, or already gone
            self.log.warning("No kernel process in the sandbox to send signal %d to", signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signum)

    async def kill(self, restart: bool = False) -> None:
        if self.sandbox is not None:
            self.sandbox.kill()

    async def terminate(self, restart: bool = False) -> None:
        # There is nothing in a student's kernel to let it save: stop it as surely as kill.
        await self.kill(restart=restart)

    async def cleanup(self, restart: bool = False) -> None:
        # The kernel may have exited by itself (a shutdown request, a crash): kill whatever
        # it left behind all the same (the pids cgroup, or the unsandboxed session).
        if self.sandbox is not None:
            self.sandbox.kill()
            self.sandbox = None
        if not restart:
            self._remove_folder()
        await super().cleanup(restart=restart)

    def _remove_folder(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


class _BoundedHeartbeat(HBChannel):
    """A heartbeat channel whose `stop` returns even when its thread is stuck.

    The thread pings the kernel over a ZeroMQ REQ socket. After a notebook wrote garbage into
    its sockets, that send can block for good, and HBChannel.stop joins the thread with no
    timeout. The thread is a daemon: left behind, it costs a socket until the grader exits."""

    STOP_SECONDS = 5.0

    def stop(self) -> None:
        self._running = False
        self._exit.set()
        self.join(self.STOP_SECONDS)
        if not self.is_alive():  # a ZeroMQ socket is closed only by the thread that is done with it
            self.close()


class _SandboxedKernelClient(AsyncKernelClient):
    hb_channel_class = Type(_BoundedHeartbeat)


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel runs in the sandbox (see the module docstring)."""

    limits = Instance(Limits, help="The kernel's resource limits (autograder.trust.sandbox.Limits).").tag(config=True)
    mounts = List(
        Tuple(Unicode(), Unicode()),
        help="(source, destination) pairs: files or folders of the grader's shown read-only inside the sandbox.",
    ).tag(config=True)

    @default("limits")
    def _default_limits(self):
        return KERNEL_LIMITS

    @default("client_factory")
    def _default_client_factory(self):
        return _SandboxedKernelClient

    @default("transport")
    def _default_transport(self):
        return "ipc"

    @default("cache_ports")
    def _default_cache_ports(self):
        return False  # there are no TCP ports to cache

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        # The sandbox holds one Python, the grader's environment, whatever kernel the
        # notebook's metadata names; a kernelspec elsewhere on the disk would not be there.
        connection_file = CONNECTION_FILE_INSIDE if sandbox_problem() is None else self.connection_file
        return [sys.executable, "-m", "ipykernel_launcher", "-f", connection_file, *(extra_arguments or [])]

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        await super()._async_launch_kernel(kernel_cmd, **kw)
        # From here on the grader's clients reach the kernel's sockets from outside the sandbox.
        self.ip = self.provisioner.sockets_outside

    async def _async_pre_start_kernel(self, **kw):
        if self.provisioner is None:  # jupyter_client would pick one from the kernelspec
            self.kernel_id = self.kernel_id or kw.pop("kernel_id", str(uuid.uuid4()))
            self.provisioner = SandboxedProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec,
                                                    parent=self)
        return await super()._async_pre_start_kernel(**kw)


class _NotebookStopped(Exception):
    """Raised past nbclient once a cell has killed or hung the kernel."""


TRUNCATED = "output truncated: this cell printed or displayed more than the grader keeps, and the rest was dropped"


@dataclass
class _OutputBudget:
    outputs: int  # outputs a cell may still add
    chars: int  # characters of output (stream text, or serialised display data) it may still add
    truncated: bool = False


def _size(msg: dict) -> int:
    content = msg["content"]
    if msg["msg_type"] == "stream":
        return len(content.get("text", ""))
    return len(json.dumps(content, default=str))


class SandboxedExecute(Execute):
    """nbgrader's Execute preprocessor, with its kernel in the sandbox and a cap on the
    outputs a cell keeps. A drop-in for `Execute` in `Autograde.autograde_preprocessors`;
    `c.Execute` settings (timeout, ...) apply to it too."""

    max_outputs = Integer(200, help="Outputs one cell may keep.").tag(config=True)
    max_output_chars = Integer(
        1_000_000, help="Characters of output (stream text, serialised display data) one cell may keep."
    ).tag(config=True)
    max_notebook_output_chars = Integer(
        5_000_000, help="Characters of output and widget (comm) messages the whole notebook may send."
    ).tag(config=True)
    max_notebook_seconds = Integer(
        1200, help="Seconds the whole notebook may run; cells after that are not run (the page says so)."
    ).tag(config=True)
    unit_limits = Callable(
        None, allow_none=True,
        help="assignment name -> (seconds one of its cells may run or None, its page's Budget or None): "
             "the course's units, as the nbgrader settings give them (this folder knows no unit).",
    ).tag(config=True)

    def __init__(self, **kw):
        # Before nbgrader's Execute sets its own default, AsyncKernelManager.
        kw.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(**kw)
        self._budget = _OutputBudget(outputs=self.max_outputs, chars=self.max_output_chars)

    @default("kernel_manager_class")
    def _default_kernel_manager_class(self):
        return SandboxedKernelManager

    @validate("kernel_manager_class")
    def _only_sandboxed_kernels(self, proposal):
        # A configured kernel manager must not quietly take the student's code out of the sandbox.
        if not issubclass(proposal.value, SandboxedKernelManager):
            raise TraitError(f"SandboxedExecute needs a SandboxedKernelManager, not {proposal.value.__name__}")
        return proposal.value

    @default("shutdown_kernel")
    def _default_shutdown_kernel(self):
        return "immediate"  # nothing in a student's kernel needs a graceful end; don't wait for one

    @default("store_widget_state")
    def _default_store_widget_state(self):
        return False  # the feedback page shows no widgets; their state would only grow the notebook

    @default("startup_timeout")
    def _default_startup_timeout(self):
        # A sandbox and a kernel take a second to start on an idle machine, and many times that
        # on one grading a class with more workers than cores. A kernel that cannot start fails
        # the notebook (the grader's failure: it is not recorded, and tried again next run).
        return 600

    # ------------------------------------------------------------ the output cap
    #
    # Every output message of a cell is charged, whether nbclient keeps it in the cell or
    # hands it to an Output widget, and so is every widget (comm) message; a clear_output
    # does not refund anything. Each cell has a budget, and all cells together draw on the
    # notebook's. Past the budget, outputs are dropped and one note is added. The note is an error output:
    # nbgrader scores a grade cell 0 when its outputs hold an error, and a grade cell
    # without a result or an error scores full marks, so a cell whose score was dropped
    # must not pass for one that never printed one. (A note on stderr would do the same,
    # but nbgrader's LimitOutput, which runs next, drops stream outputs past 1000 lines.)

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        self._budget = _OutputBudget(outputs=self.max_outputs,
                                     chars=max(0, min(self.max_output_chars, self._notebook_chars_left)))
        if cell.cell_type == "code" and self._meter.exceeded:
            # The notebook's budget (budget.py), as the hidden tests' run has one: what one
            # notebook may spend of a class-grading worker's time, computing or waiting.
            cell.outputs = [new_output("error", ename="NotebookStopped", traceback=[], evalue=(
                f"not run: {self._meter.exceeded}. Your grades come from the hidden tests, which ran your code "
                "separately."))]
            return cell
        if cell.cell_type != "code":
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        sandbox = getattr(getattr(self.km, "provisioner", None), "sandbox", None)
        began, clock = time.monotonic(), sandbox.main_thread_clock() if sandbox is not None else None
        ours = own_thread_clock()
        if sandbox is not None and self._cpu_baseline is None:  # the kernel's own start is not the notebook's
            self._cpu_baseline = sandbox.total_cpu_seconds()
        try:
            return await self._execute_code_cell(cell, cell_index, execution_count, store_history)
        finally:
            if sandbox is not None:
                self._charge_budget(sandbox, began, clock, ours, f"cell {cell_index + 1} ran")

    def _charge_budget(self, sandbox: SandboxedProcess, began: float, clock, ours, doing: str) -> None:
        """Add what one cell spent to the notebook's budget: the sandbox's CPU time, and the time
        the kernel's main thread (which runs the cell) was blocked on its own account, from the
        scheduler's statistics (sandbox.blocked_seconds)."""
        now, current = time.monotonic(), sandbox.main_thread_clock()
        if clock is not None and current is not None:
            self._meter.waiting += blocked_seconds(now - began, clock, current, ours, own_thread_clock())
        cpu = sandbox.total_cpu_seconds()
        if cpu is not None and self._cpu_baseline is not None:
            self._cpu_spent = max(0.0, cpu - self._cpu_baseline)
            self._meter.over(self._cpu_spent, 0.0, doing)

    async def _execute_code_cell(self, cell, cell_index, execution_count, store_history):
        if time.monotonic() > self._notebook_deadline:
            # A notebook that keeps every cell waiting (a garbled kernel connection, a cell that
            # sleeps to its timeout over and over) does not hold up the class: this page only
            # shows the outputs; the grades come from the hidden tests, which ran separately.
            cell.outputs = [new_output("error", ename="NotebookStopped", traceback=[], evalue=(
                f"not run: the notebook had run for {self.max_notebook_seconds} s. Your grades come from the "
                "hidden tests, which ran your code separately."))]
            return cell
        try:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        except (DeadKernelError, CellTimeoutError) as err:
            # The kernel died here (os._exit, a crash, the memory limit) or the cell ignored
            # its interrupt. nbgrader would drop the whole notebook, grades and all; the
            # grades come from the hidden tests, which ran this code separately, so say what
            # happened on this cell and stop running the rest (see `preprocess`).
            what = "stopped the kernel" if isinstance(err, DeadKernelError) else "ignored its interrupt"
            cell.setdefault("outputs", []).append(new_output(
                "error", ename="NotebookStopped", traceback=[],
                evalue=f"this cell {what}, so the cells after it were not run for this page. Your grades "
                       "come from the hidden tests, which ran your code separately."))
            raise _NotebookStopped from err

    def preprocess(self, nb, resources=None, km=None):
        # The unit's own cell limit, where it has one (nbconvert re-runs NotebookClient.__init__
        # in preprocess, which resets `timeout` from the config: hence `_get_timeout` below).
        unit = ((resources or {}).get("nbgrader") or {}).get("assignment")
        self._unit_cell_seconds, page_budget = self.unit_limits(unit) if self.unit_limits else (None, None)
        self._meter = Meter(page_budget, Meter.PAGE)
        self._cpu_baseline, self._cpu_spent = None, 0.0
        self._notebook_chars_left = self.max_notebook_output_chars
        self._notebook_deadline = time.monotonic() + self.max_notebook_seconds
        try:
            return super().preprocess(nb, resources, km)
        except _NotebookStopped:
            return nb, resources
        finally:
            self.log.info("The notebook's cells spent %s", self._meter.report(self._cpu_spent))

    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        limit = getattr(self, "_unit_cell_seconds", None)
        return limit if limit and (timeout is None or limit < timeout) else timeout

    # nbclient binds its synchronous execute_cell to its own async_execute_cell.
    execute_cell = run_sync(async_execute_cell)

    _notebook_chars_left = 0  # set for each notebook in preprocess
    _notebook_deadline = float("inf")
    _meter = Meter(None)
    _cpu_baseline: float | None = None
    _cpu_spent = 0.0

    def _charge(self, chars: int, outputs: int = 0) -> None:
        self._budget.chars -= chars
        self._budget.outputs -= outputs
        self._notebook_chars_left -= chars

    def _truncate(self, outs) -> dict:
        self._budget.truncated = True
        note = new_output("error", ename="OutputTruncated", evalue=TRUNCATED,
                          traceback=[f"OutputTruncated: {TRUNCATED}"])
        outs.append(note)
        return note

    def output(self, outs, msg, display_id, cell_index):
        budget = self._budget
        if budget.truncated:
            return None
        size = _size(msg)
        if budget.outputs > 1 and size <= budget.chars:  # one output is kept back for the note
            self._charge(size, outputs=1)
            return super().output(outs, msg, display_id, cell_index)
        if msg["msg_type"] == "stream" and budget.outputs > 1 and budget.chars > 0:
            # Keep the start of the text that overflows: it shows what the cell was printing.
            head = {**msg, "content": {**msg["content"], "text": msg["content"]["text"][: budget.chars]}}
            self._charge(budget.chars)
            super().output(outs, head, display_id, cell_index)
        return self._truncate(outs)

    def _update_display_id(self, display_id, msg):
        # An update replaces the data of outputs already kept, which could grow them past the
        # budget: it is charged too (display_data and execute_result are charged in output).
        size = _size(msg)
        if self._budget.truncated or size > self._budget.chars:
            return
        if msg["msg_type"] == "update_display_data":
            self._charge(size)
        super()._update_display_id(display_id, msg)

    def handle_comm_msg(self, outs, msg, cell_index):
        # Widget messages carry state and binary buffers that nbclient would otherwise hold in
        # memory and write into the notebook: they draw on the same budget as outputs.
        if self._budget.truncated:
            return
        size = _size(msg) + sum(len(b) for b in msg.get("buffers") or ())
        if size > self._budget.chars:
            self._truncate(outs)
            return
        self._charge(size)
        super().handle_comm_msg(outs, msg, cell_index)


def configure_kernel(c) -> None:
    """Settings for the sandboxed grading kernel, in the traitlets config `c`.

    `SandboxedExecute` takes the place of nbgrader's `Execute` in
    `c.Autograde.autograde_preprocessors`: in the list already set there, or else in
    nbgrader's default list (so that a config without the list does not run students'
    code unsandboxed). Safe to call more than once, before or after the list is set.
    """
    from nbgrader.converters import Autograde

    if "autograde_preprocessors" in c.Autograde:
        preprocessors = c.Autograde.autograde_preprocessors
    else:
        preprocessors = Autograde.class_traits()["autograde_preprocessors"].default()
    c.Autograde.autograde_preprocessors = [
        SandboxedExecute if pp in (Execute, "nbgrader.preprocessors.Execute") else pp for pp in preprocessors
    ]
    # Also the class defaults; set here too because a section for SandboxedExecute outranks
    # any setting for its parents (c.NotebookClient.kernel_manager_class, ...).
    c.SandboxedExecute.kernel_manager_class = SandboxedKernelManager
    c.SandboxedExecute.shutdown_kernel = "immediate"
