"""Two workers forked from one zygote, each asked what it can see and do: what
tests/test_zygote.py runs, in its own process and as an ordinary user, and judges.

    python tests/zygote_probe.py     # prints one JSON object
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# A submission that looks around its sandbox and leaves a mark in each private folder.
PROBE = '''
import os, random, threading, time

def look(mark):
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    found = {
        "uid": status["Uid"].split()[0],
        "no_new_privs": status["NoNewPrivs"].strip(),
        "capabilities": [status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")],
        "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "descriptors": descriptors(),
        "seen": {folder: sorted(os.listdir(folder)) for folder in ("/tmp", "/scratch", "/dev/shm")},
        "draw": random.random(),
    }
    for folder in ("/tmp", "/scratch", "/dev/shm"):
        with open(os.path.join(folder, mark), "w") as f:
            f.write(mark)
    try:
        os.kill(1, 9)  # its init: ignored inside the namespace
    except OSError as err:
        found["kill_init"] = type(err).__name__
    return found

def descriptors():
    """What each open descriptor is ("pipe", "/dev/null", "socket"...), the listing's own aside."""
    kinds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            kinds.append(os.readlink(f"/proc/self/fd/{fd}").split(":")[0])
        except OSError:
            pass  # the descriptor of the listing itself, closed by now
    return sorted(kinds)

def hog():
    """As many sleeping threads as the process cap allows, held."""
    count = 0
    while count < 5000:
        try:
            threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
        except RuntimeError:
            break
        count += 1
    return count

def threads(count):
    started = []
    for _ in range(count):
        thread = threading.Thread(target=time.sleep, args=(0.01,))
        thread.start()
        started.append(thread)
    for thread in started:
        thread.join()
    return len(started)
'''


def main() -> int:
    from autograder.grading.plugin import worker_setup
    from autograder.trust import zygote
    from autograder.trust.student import Student

    setup = worker_setup(["01_attention"])
    a, b = Student([("probe", PROBE)], **setup), Student([("probe", PROBE)], **setup)
    a.start()
    b.start()
    try:
        first = a.call("look", "a")
        other = b.call("look", "b")
        again = a.call("look", "a2")
        hogged = a.call("hog", seconds=30)
        beside = b.call("threads", 50)
        report = {
            "kinds": [type(s.process).__name__ for s in (a, b)],
            "unfit": zygote._unfit,
            "fork_failure": zygote.last_failure,
            "zygotes": len(zygote._zygotes),
            "first": first.value, "other": other.value, "again": again.value,
            "errors": [o.error for o in (first, other, again, hogged, beside) if o.error],
            "hogged": hogged.value, "beside": beside.value,
        }
    finally:
        a.close()
        b.close()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
