"""The installed wheel carries its native libraries: auditwheel's repair copied every shared library
the extension needs, beyond the system's base set, into stoker.libs/ beside the package, and the
extension resolves each of them there. Runs on the repaired wheel scripts/test_python.sh installs
(STOKER_WHEEL=repaired); a `pip install .` of a working copy links the system's libraries."""

import importlib.metadata
import os
import re
import shutil
import subprocess

import pytest

from stoker import _stoker

pytestmark = pytest.mark.skipif(
    os.environ.get("STOKER_WHEEL") != "repaired",
    reason="the installed package is not the repaired wheel (scripts/test_python.sh sets STOKER_WHEEL=repaired)")

# auditwheel's policy for manylinux_2_x (its lib_whitelist): the libraries every such system has,
# which a wheel may link without carrying them, and the dynamic loader.
BASE = {
    "libatomic.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libmvec.so.1", "libanl.so.1", "libdl.so.2",
    "librt.so.1", "libc.so.6", "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libX11.so.6", "libXext.so.6",
    "libXrender.so.1", "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0",
    "libglib-2.0.so.0", "libresolv.so.2", "libexpat.so.1", "libz.so.1", "ld-linux-x86-64.so.2", "linux-vdso.so.1"
}

EXTENSION = os.path.realpath(_stoker.__file__)
LIBS = os.path.join(os.path.dirname(os.path.dirname(EXTENSION)), "stoker.libs")


def _needed(path):
    """The DT_NEEDED names of an ELF file."""
    out = subprocess.run(["readelf", "-d", path], check=True, capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def _ldd(path):
    """ldd's resolution of a file: {name: resolved path, or None when not found}."""
    out = subprocess.run(["ldd", path], check=True, capture_output=True, text=True).stdout
    resolved = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (not found|(\S+) \(0x)", line)
        if m:
            resolved[m.group(1)] = m.group(3)
        elif (m := re.match(r"\s*(/\S+) \(0x", line)):
            resolved[os.path.basename(m.group(1))] = m.group(1)
    return resolved


@pytest.fixture(scope="module")
def tools():
    for tool in ("readelf", "ldd"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")


def test_the_wheel_has_a_manylinux_tag():
    tags = re.findall(r"^Tag: (\S+)$", importlib.metadata.distribution("stoker").read_text("WHEEL"), re.M)
    assert tags and all("-manylinux_" in tag for tag in tags), f"the installed wheel's tags: {tags}"


def test_every_library_the_extension_needs_is_the_wheels_or_the_systems_base(tools):
    assert os.path.isdir(LIBS), f"the wheel carries no stoker.libs/ beside the package ({LIBS})"
    seen, todo = set(), [EXTENSION]
    while todo:
        path = todo.pop()
        for name in _needed(path):
            if name in BASE or name in seen:
                continue
            carried = os.path.join(LIBS, name)
            assert os.path.isfile(carried), f"{os.path.basename(path)} needs {name}, which the wheel does not carry"
            seen.add(name)
            todo.append(carried)
    assert any(name.startswith("libopencv_core") for name in seen), sorted(seen)
    assert any(name.startswith("libtbb") for name in seen), sorted(seen)


def test_the_extension_resolves_them_only_in_the_wheel_or_the_system(tools):
    resolved = _ldd(EXTENSION)
    missing = sorted(name for name, path in resolved.items() if path is None)
    assert not missing, f"ldd {EXTENSION} finds no {missing}"
    # What the base libraries load is the system's business (libX11's libxcb), not the wheel's.
    allowed = set(BASE)
    for name, path in resolved.items():
        if name in BASE and path:
            allowed.update(_ldd(path))
    outside = sorted(f"{name} => {path}" for name, path in resolved.items()
                     if name not in allowed and os.path.dirname(os.path.realpath(path)) != LIBS)
    assert not outside, "resolved outside the wheel's stoker.libs/ and the system's base set:\n" + "\n".join(outside)
