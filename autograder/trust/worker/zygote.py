"""The worker's zygote: a sandboxed process that has started Python and imported what a unit's
checks and notebook need, and then only forks. It never runs a submission's code.

What every worker spends before it runs any code of a submission (Python's start, NumPy's and
PyTorch's imports, torch._dynamo's for an optimizer: one to two and a half seconds of CPU) is the
same for every submission, so it is done once here, and each worker is a fork of this process
that has done it. A fork is only the worker's start, never its sandbox: before the child runs
anything of a submission it becomes a sandbox of its own, nested in this one (the way Chrome's
and Android's zygotes start their sandboxed processes):

    zygote (this file)           bubblewrap's sandbox: the root read-only, no network, no capabilities
      fork -> C                  unshares a new user, mount, PID, network, IPC, UTS and cgroup
                                 namespace; fresh, private, capped /tmp, /scratch and /dev/shm over
                                 this sandbox's, each a copy of what the zygote's imports left in
                                 its own (a cache folder); reports G to the grader; exits
        fork -> G                PID 1 of the new PID namespace: waits for the grader's "go" (it
                                 has put G in a process cap of its own), mounts a /proc that shows
                                 this namespace only (its machine-wide parts read-only), forks
                                 H, drops every capability and reaps
          fork -> H              one more user namespace, as the unprivileged user, with no
                                 capability (bounding and ambient sets emptied) and no_new_privs;
                                 waits until G has none either; its own random seeds; then the
                                 worker (main.py) for one submission

So H sees nothing of this process, of its siblings (other submissions' workers, forked from here
too) or of the grader: not their files (each has its own /tmp and /scratch), processes (its own
PID namespace and /proc), sockets (its own network namespace) or shared memory (its own IPC
namespace), and it holds none of this process's descriptors (the control socket is closed before
anything else). Killing G ends everything H started. Each fork serves one submission and is never
reused; the zygote never receives anything but "fork" and two pipes.

    python -I -B main.py --zygote CONTROL_FD TMP_BYTES PROCESSES IMPORTS_JSON

CONTROL_FD is a SOCK_SEQPACKET socket to the grader: this process sends b"ready" once its imports
are done (or b"unfit: why" and exits, when it cannot fork safely), then reads b"fork" messages,
each carrying the two pipe ends of a new worker (its requests, its replies). It answers nothing
on that socket (several grading runs forked from one grader may share it): C's report, the first
message on the new worker's reply pipe, is {"op": "forked", "pid": G as numbered here}.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import signal
import socket
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    0x1, 0x2, 0x4, 0x8, 0x20, 0x1000, 0x4000, 0x40000)
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 4, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}.get(os.uname().machine)
NOBODY = 65534
PRIVATE_FOLDERS = ("/tmp", "/scratch", "/dev/shm")
# Parts of /proc that act on the whole machine, which a process that is root outside (a root
# grader's sandbox) could write: made read-only in each fork's /proc, as bubblewrap does in its own.
PROC_COVERED = ("sys", "sysrq-trigger", "irq", "bus")

_libc = ctypes.CDLL(None, use_errno=True)


class Unfit(Exception):
    """This process cannot make a sandbox of a fork (the kernel refuses a step): say why and exit."""


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise Unfit(f"{what}: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _mount(source: str, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode(), target.encode(), kind.encode() if kind else None, ctypes.c_ulong(flags),
                       data.encode() if data else None), f"mount {target}")


def _own_user_namespace(inside: int, outside: int) -> None:
    """A new user namespace in which this process is `inside`, the id it had as `outside`."""
    _check(_libc.unshare(CLONE_NEWUSER), "a user namespace")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{inside} {outside} 1")
    _write("/proc/self/gid_map", f"{inside} {outside} 1")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """No capability left, now or after an exec: the bounding and ambient sets emptied, then the
    effective, permitted and inheritable ones."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read())  # noqa: SIM115 - a one-line read
    for cap in range(last + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # fails harmlessly for a cap already gone
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    if SYS_CAPSET is None:
        raise Unfit(f"no capset call known for {os.uname().machine}")
    header, data = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(_libc.syscall(SYS_CAPSET, ctypes.byref(header), data), "dropping capabilities")


def _status() -> dict[str, str]:
    with open("/proc/self/status") as f:
        return dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)


def _assert_unprivileged() -> None:
    """Refuse to go on unless the kernel says this process has no capability at all and runs as
    the unprivileged user: nothing of a submission runs otherwise."""
    status = _status()
    caps = [status.get(k, "").strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")]
    if any(c.strip("0") for c in caps) or status.get("NoNewPrivs", "").strip() != "1":
        raise Unfit(f"capabilities left: {caps}")
    if status.get("Uid", "").split()[:1] != [str(NOBODY)]:
        raise Unfit(f"not the unprivileged user: {status.get('Uid')}")


def _wait_until_powerless(pid: int, seconds: float = 30.0) -> None:
    """Until the kernel says `pid` has no capability left (G, in the instants after it forks H)."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        if not any(status.get(k, "").strip().strip("0") for k in ("CapPrm", "CapEff", "CapBnd", "CapAmb")):
            return
        time.sleep(0.001)
    raise Unfit(f"process {pid} kept its capabilities")


def _copy_tree(source_fd: int, target: str) -> None:
    """Copy the folder open as `source_fd` (plain files and folders; links as links) into `target`."""
    import stat

    for entry in os.scandir(source_fd):
        info = entry.stat(follow_symlinks=False)
        path = os.path.join(target, entry.name)
        if stat.S_ISDIR(info.st_mode):
            os.mkdir(path, stat.S_IMODE(info.st_mode))
            inner = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=source_fd)
            try:
                _copy_tree(inner, path)
            finally:
                os.close(inner)
        elif stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(entry.name, dir_fd=source_fd), path)
        elif stat.S_ISREG(info.st_mode):
            source = os.open(entry.name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=source_fd)
            try:
                copy = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IMODE(info.st_mode))
                try:
                    while chunk := os.read(source, 1 << 20):
                        os.write(copy, chunk)
                finally:
                    os.close(copy)
            finally:
                os.close(source)


def _mounts_under(folder: str) -> list[str]:
    """The mount points strictly under `folder` in this process's mount namespace."""
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].replace("\\040", " ") for line in f]
    return [point for point in points if point.startswith(folder.rstrip("/") + "/")]


def _loopback_up() -> None:
    import fcntl
    import struct

    siocsifflags, up_loopback_running = 0x8914, 0x1 | 0x8 | 0x40
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        fcntl.ioctl(probe, siocsifflags, struct.pack("16sh22x", b"lo", up_loopback_running))


def _close_all_but(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, closed already


# ---------------------------------------------------------------- the zygote


def serve(control_fd: int, tmp_bytes: int, processes: int, imports: list[str], run_worker) -> int:
    """The zygote's life: its imports, then a fork for each request; `run_worker(request_fd,
    reply_fd)` is what H runs (main.serve)."""
    import importlib

    control = socket.socket(fileno=control_fd)
    for name in imports:  # what every worker of this kind imports before any submission's code
        try:
            importlib.import_module(str(name))
        except Exception:  # noqa: BLE001 - the check that needs it will say what is wrong
            pass
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:  # a fork copies one thread: another one's locks would stay held in the child
        control.send(f"unfit: {threads} threads after the imports".encode())
        return 1
    for folder in PRIVATE_FOLDERS:
        held = _mounts_under(folder)
        if held:  # each fork's private folder would hide them (and copying them filled it: ENOSPC)
            control.send(f"unfit: {folder} holds what the sandbox mounted there ({held[0]}: the course or its "
                         f"Python environment lives under {folder}), which a fork's private {folder} would "
                         "hide".encode())
            return 1
    # What the forks share stays shared: a child's garbage collections leave these objects alone
    # (walking them would copy every page they sit on).
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control.send(b"ready")
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 64, 2)
        except OSError:
            return 0
        if not message:
            return 0  # the grader is gone
        if message != b"fork" or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            continue
        pid = os.fork()
        if pid == 0:
            try:
                _child(control, fds[0], fds[1], tmp_bytes, processes, run_worker)
            except BaseException as err:  # noqa: BLE001 - never back into the zygote's loop
                _report_unfit(fds[1], err)
            os._exit(70)
        for fd in fds:
            os.close(fd)
        os.waitpid(pid, 0)  # C exits as soon as G is forked


def _report_unfit(reply_fd: int, err: BaseException) -> None:
    """C's last word when it could not make the sandbox: why, in place of its report (the grader
    then starts this worker another way and keeps the reason)."""
    try:
        import time

        import channel

        channel.send(reply_fd, {"op": "unfit", "why": f"{type(err).__name__}: {err}"[:300]}, [],
                     time.monotonic() + 5)
    except BaseException:  # noqa: BLE001 - the grader sees the pipe close instead
        pass


def _child(control: socket.socket, request_fd: int, reply_fd: int, tmp_bytes: int, processes: int,
           run_worker) -> None:
    """C: the new namespaces and private folders, then G; exits once G is reported."""
    import resource

    import channel

    control.close()
    _close_all_but({0, 1, 2, request_fd, reply_fd})
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    uid = os.getuid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
                         | CLONE_NEWCGROUP), "new namespaces")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"0 {uid} 1")
    _write("/proc/self/gid_map", f"0 {os.getgid()} 1")
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    _loopback_up()  # as bubblewrap leaves a sandbox's network: itself, and nothing else
    for folder in PRIVATE_FOLDERS:  # each a copy of the zygote's (what its imports left there)
        old = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmp_bytes},mode=0755")
            _copy_tree(old, folder)
        finally:
            os.close(old)
    # This sandbox's process cap: every user namespace records the cap of the process that made
    # it, and a process counts against the cap of each namespace it is nested in, so this one's
    # count (G, H and all they start) is held to `processes`, and not shared with its siblings.
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    sync_r, sync_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(sync_w)
        _init(sync_r, request_fd, reply_fd, run_worker)
    os.close(sync_r)
    import time

    channel.send(reply_fd, {"op": "forked", "pid": pid}, [], time.monotonic() + 30)
    os._exit(0)  # closes sync_w: G goes on, after this report


def _init(sync_r: int, request_fd: int, reply_fd: int, run_worker) -> None:
    """G, PID 1 of the new namespace: /proc, then H; then it reaps, and ends with H."""
    import channel

    code = 71
    try:
        while os.read(sync_r, 1):
            pass
        os.close(sync_r)
        header, _ = channel.receive(request_fd)  # the grader's go: this sandbox has its own cap now
        if header.get("op") != "go":
            os._exit(72)
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        for entry in PROC_COVERED:  # read-only, as bubblewrap leaves them: see PROC_COVERED
            path = f"/proc/{entry}"
            if os.path.exists(path):
                _mount(path, path, None, MS_BIND | MS_REC)
                _mount(path, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
        # H makes its user namespace while G still has its capabilities (Linux lets a namespace map
        # its maker's root only where the maker could set file capabilities); then G drops them,
        # and H waits for that before it says hello.
        pid = os.fork()
        if pid == 0:
            _worker(request_fd, reply_fd, run_worker)
        drop_capabilities()
        os.close(request_fd)
        os.close(reply_fd)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_IGN)
        while True:
            try:
                done, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            if done == pid:
                code = os.waitstatus_to_exitcode(status) & 0xFF
                break
    except BaseException:  # noqa: BLE001 - the grader sees the worker never said hello
        pass
    os._exit(code)  # as PID 1, its end ends everything in the namespace


def _worker(request_fd: int, reply_fd: int, run_worker) -> None:
    """H: the unprivileged user with no capability, then the worker for one submission."""
    code = 73
    try:
        _own_user_namespace(NOBODY, 0)
        drop_capabilities()
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        _assert_unprivileged()
        _wait_until_powerless(1)  # G
        # Linux made it undumpable when it took a new user namespace; a worker started afresh is
        # dumpable (exec resets it), so the grader, as the same user, reads its /proc (the scratch
        # folder's files). Nothing else can: no other process shares its PID namespace.
        _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        os.chdir("/scratch")
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # Fresh processes draw their seeds from the system; so does each fork (not the zygote's).
        import random

        random.seed()
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed()
        sys.argv = [sys.argv[0], str(request_fd), str(reply_fd)]  # as a worker started afresh has it
        code = run_worker(request_fd, reply_fd)
    except BaseException:  # noqa: BLE001 - nothing of a submission ran: the grader sees no hello
        pass
    os._exit(code)


def main(argv: list[str], run_worker) -> int:
    control_fd, tmp_bytes, processes = int(argv[0]), int(argv[1]), int(argv[2])
    return serve(control_fd, tmp_bytes, processes, list(json.loads(argv[3])), run_worker)
