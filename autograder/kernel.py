"""nbgrader's grading kernel, run inside the sandbox.

`nbgrader autograde` executes each submitted notebook in an IPython kernel, and that
kernel runs whatever the student wrote. nbgrader starts it as a plain child of the grader:
it could read the hidden tests, the reference solutions, the gradebook and the other
submissions, write over them, and reach the network. Here the kernel is a
`SandboxedProcess` (see sandbox.py): a private root where the course tree shows only the
environment and coursekit, no network, its own PID namespace, and resource limits.

Three things change because of that:

- Transport. The sandbox has a network namespace of its own, so the kernel cannot listen
  on the grader's 127.0.0.1. It talks over Unix sockets (ZeroMQ's `ipc` transport) in a
  private folder made for each kernel, bound read-write into the sandbox at the same path,
  next to the connection file. The folder is removed when the kernel is cleaned up. (It
  is the one place on the grader's disk the kernel can write to, within the sandbox's
  file-size limit, for as long as the notebook runs.)
- Signals. The grader's child is bubblewrap, not the kernel, and bubblewrap forwards no
  signals. nbgrader interrupts a cell that runs past its timeout with SIGINT, so the
  interrupt goes to the process group inside the sandbox, where the kernel runs; every
  other way of stopping the kernel kills the whole sandbox, and with it everything the
  notebook started.
- Working folder. The kernel runs in the sandbox's private /scratch, not in the
  submission's folder (which is on the grader's disk).

`SandboxedExecute` is nbgrader's `Execute` with this kernel, and it also caps what one cell
may accumulate in the grader's memory: a cell that prints in a tight loop until its
timeout would otherwise hold every line of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from traitlets import Instance, Integer, List, TraitError, Tuple, Unicode, default, validate

from .sandbox import Limits, SandboxedProcess, sandbox_problem

# One kernel runs a whole notebook, where a sandboxed worker serves a few checks: its CPU
# budget covers every cell running to nbgrader's 30-second timeout in a long notebook.
KERNEL_LIMITS = replace(Limits(), cpu_seconds=30 * 60)

# Variables of the grader's environment that the kernel also sees (it gets a fresh
# environment, not the grader's). nbgrader sets NBGRADER_EXECUTION while autograding;
# notebooks may test it to skip slow cells.
PASSED_TO_KERNEL = ("NBGRADER_EXECUTION",)


def _children(pid: int) -> list[int]:
    """The process ids of `pid`'s children."""
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:  # a Linux kernel built without CONFIG_PROC_CHILDREN: look at every process
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                # The fields after the command name, which may itself hold spaces and ')'.
                if int(stat.read_text().rpartition(")")[2].split()[1]) == pid:
                    children.append(int(stat.parent.name))
        return children


class SandboxedProvisioner(LocalProvisioner):
    """Starts the kernel as a `SandboxedProcess`, and stops and signals it there."""

    folder: str | None = None  # the connection file and sockets; kept across restarts
    sandbox: SandboxedProcess | None = None

    async def pre_launch(self, **kwargs):
        km = self.parent
        if self.folder is None:
            # realpath: the folder is bound at the same path inside, and the connection
            # file names the sockets by this path on both sides.
            self.folder = os.path.realpath(tempfile.mkdtemp(prefix="grader-kernel-"))
        km.transport = "ipc"
        km.ip = os.path.join(self.folder, "kernel-ipc")  # sockets kernel-ipc-1 ... kernel-ipc-5
        km.connection_file = os.path.join(self.folder, "kernel.json")
        return await super().pre_launch(**kwargs)

    async def launch_kernel(self, cmd: list[str], **kwargs):
        # kwargs holds nbclient's cwd (the submission's folder) and the grader's whole
        # environment: the kernel gets neither.
        env = {name: os.environ[name] for name in PASSED_TO_KERNEL if name in os.environ}
        if sandbox_problem() is not None:
            # Unsandboxed, the kernel is the grader's child: let it exit if the grader dies.
            # (Sandboxed, bubblewrap's --die-with-parent does that, and the kernel's parent
            # is the sandbox's init, which this variable would mistake for an orphaning.)
            env["JPY_PARENT_PID"] = str(os.getpid())
        km = self.parent
        try:
            self.sandbox = SandboxedProcess(cmd, limits=km.limits, shared_dirs=(self.folder,), cwd="/scratch",
                                            env=env, mounts=tuple(tuple(m) for m in km.mounts))
        except BaseException:
            self._remove_folder()
            raise
        self.process = self.sandbox.proc
        self.pid = self.process.pid
        self.pgid = None  # see _kernel_group: bubblewrap's own group holds only bubblewrap
        self.cwd = "/scratch"
        return self.connection_info

    def _kernel_group(self) -> int | None:
        """The process group of the kernel and what it started, as the grader numbers it."""
        if not self.sandbox.sandboxed:
            return self.sandbox.pid  # started in a session of its own
        # bubblewrap's child is the sandbox's init (PID 1 inside), which made a new session
        # (--new-session) and started the kernel in it. An init ignores signals it has no
        # handler for, so a SIGINT to this group reaches the kernel and its children only.
        children = _children(self.sandbox.pid)
        return children[0] if children else None

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


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel runs in the sandbox (see the module docstring)."""

    limits = Instance(Limits, help="The kernel's resource limits (autograder.sandbox.Limits).").tag(config=True)
    mounts = List(
        Tuple(Unicode(), Unicode()),
        help="(source, destination) pairs: files or folders of the grader's shown read-only inside the sandbox.",
    ).tag(config=True)

    @default("limits")
    def _default_limits(self):
        return KERNEL_LIMITS

    @default("transport")
    def _default_transport(self):
        return "ipc"

    @default("cache_ports")
    def _default_cache_ports(self):
        return False  # there are no TCP ports to cache

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        # The sandbox holds one Python, the grader's environment, whatever kernel the
        # notebook's metadata names; a kernelspec elsewhere on the disk would not be there.
        return [sys.executable, "-m", "ipykernel_launcher", "-f", self.connection_file, *(extra_arguments or [])]

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

    # ------------------------------------------------------------ the output cap
    #
    # Every output message of a cell is charged, whether nbclient keeps it in the cell or
    # hands it to an Output widget; a clear_output does not refund anything. Past the
    # budget, outputs are dropped and one note is added. The note is an error output:
    # nbgrader scores a grade cell 0 when its outputs hold an error, and a grade cell
    # without a result or an error scores full marks, so a cell whose score was dropped
    # must not pass for one that never printed one. (A note on stderr would do the same,
    # but nbgrader's LimitOutput, which runs next, drops stream outputs past 1000 lines.)

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        self._budget = _OutputBudget(outputs=self.max_outputs, chars=self.max_output_chars)
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
        from .units import UNITS

        unit = ((resources or {}).get("nbgrader") or {}).get("assignment")
        self._unit_cell_seconds = UNITS[unit].cell_seconds if unit in UNITS else None
        try:
            return super().preprocess(nb, resources, km)
        except _NotebookStopped:
            return nb, resources

    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        limit = getattr(self, "_unit_cell_seconds", None)
        return limit if limit and (timeout is None or limit < timeout) else timeout

    # nbclient binds its synchronous execute_cell to its own async_execute_cell.
    execute_cell = run_sync(async_execute_cell)

    def output(self, outs, msg, display_id, cell_index):
        budget = self._budget
        if budget.truncated:
            return None
        size = _size(msg)
        if budget.outputs > 1 and size <= budget.chars:  # one output is kept back for the note
            budget.outputs -= 1
            budget.chars -= size
            return super().output(outs, msg, display_id, cell_index)
        if msg["msg_type"] == "stream" and budget.outputs > 1 and budget.chars > 0:
            # Keep the start of the text that overflows: it shows what the cell was printing.
            head = {**msg, "content": {**msg["content"], "text": msg["content"]["text"][: budget.chars]}}
            super().output(outs, head, display_id, cell_index)
        budget.truncated = True
        note = new_output("error", ename="OutputTruncated", evalue=TRUNCATED,
                          traceback=[f"OutputTruncated: {TRUNCATED}"])
        outs.append(note)
        return note

    def _update_display_id(self, display_id, msg):
        # An update replaces the data of outputs already kept, which could grow them past the
        # budget: it is charged too (display_data and execute_result are charged in output).
        size = _size(msg)
        if self._budget.truncated or size > self._budget.chars:
            return
        if msg["msg_type"] == "update_display_data":
            self._budget.chars -= size
        super()._update_display_id(display_id, msg)


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
