"""What several test files share: folders of generated class images, the process's RSS."""

import os

import numpy as np

# Two classes that differ in colour: a model learns them in a few steps.
COLOURS = {"blue": (30, 40, 210), "red": (210, 40, 30)}


# What launchers set to say which rank a process is (torchrun, Lightning, Slurm).
LAUNCH = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS")


def make_folder(root, per_class=12, size=32, seed=0, ext="jpg"):
    """A folder of class folders (COLOURS plus noise), written with Pillow; returns its path."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for name, colour in COLOURS.items():
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            noise = rng.integers(-25, 26, (size, size, 3))
            a = np.clip(np.array(colour)[None, None, :] + noise, 0, 255).astype(np.uint8)
            Image.fromarray(a).save(os.path.join(root, name, f"{i:03d}.{ext}"))
    return str(root)


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def interrupted_during(setup, call, after=0.3, then="", timeout=300):
    """Ctrl-C during a blocking call, in a process of its own (a stray KeyboardInterrupt must not
    end the test run): runs the Python source `setup`, then the statement `call` with a real
    SIGINT sent `after` seconds into it, then `then`. Returns what the call did ("interrupted" or
    "returned"), the seconds from the SIGINT to that, and the lines `then` printed."""
    import subprocess
    import sys
    import textwrap

    script = "\n".join([
        "import os, signal, sys, threading, time",
        f"sys.path[:0] = {sys.path!r}",
        textwrap.dedent(setup),
        "sent = []",
        "def _interrupt():",
        "    sent.append(time.monotonic())",
        "    os.kill(os.getpid(), signal.SIGINT)",
        f"threading.Timer({after}, _interrupt).start()",
        "try:",
        f"    {call}",
        "    print('returned', time.monotonic() - sent[0] if sent else -1.0)",
        "except KeyboardInterrupt:",
        "    print('interrupted', time.monotonic() - sent[0])",
        textwrap.dedent(then),
    ])
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", script], cwd=here, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().split("\n")
    what, delay = lines[0].split()
    return what, float(delay), lines[1:]


def error_in_forked_child(use, timeout=30):
    """Calls `use()` in a child made by fork() and returns what it raised ("Error: <message>" for a
    stoker.Error, "no error" otherwise); fails the test when the child hangs. The child never
    returns into pytest."""
    import signal
    import time

    import pytest

    import stoker

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            try:
                use()
                message = "no error"
            except stoker.Error as e:
                message = "Error: " + str(e)
            os.write(w, message.encode())
        finally:
            os._exit(0)
    os.close(w)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the child hung on what it inherited")
    message = os.read(r, 4096).decode()
    os.close(r)
    return message
