#!/usr/bin/env bash
# The repaired wheel on a system that has nothing but the manylinux base set: in a mount namespace
# of its own (unshare -m, root), the system's library folders are replaced by one that holds only
# auditwheel's base libraries (and what libX11 loads); Python imports stoker there, loads a first
# batch and checks that every shared library in the process is Python's, a wheel's (stoker.libs/,
# numpy.libs/, …) or from that folder.
#   bash scripts/check_wheel_base.sh PYTHON IMAGE_FOLDER   # PYTHON: a venv with the wheel installed
set -euo pipefail
py=$1 data=$2
system=/usr/lib/x86_64-linux-gnu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
base=$work/base
mkdir "$base"
# auditwheel's manylinux_2_x lib_whitelist (python/tests/test_wheel.py names it too) and the loader.
for name in libatomic.so.1 libgcc_s.so.1 libstdc++.so.6 libm.so.6 libmvec.so.1 libanl.so.1 libdl.so.2 librt.so.1 \
  libc.so.6 libnsl.so.1 libutil.so.1 libpthread.so.0 libX11.so.6 libXext.so.6 libXrender.so.1 libICE.so.6 \
  libSM.so.6 libGL.so.1 libgobject-2.0.so.0 libgthread-2.0.so.0 libglib-2.0.so.0 libresolv.so.2 libexpat.so.1 \
  libz.so.1 ld-linux-x86-64.so.2; do
  if [[ -e $system/$name ]]; then cp -L "$system/$name" "$base/"; fi
done
# What the base libraries load is the system's (libX11's libxcb).
for lib in "$base"/*; do
  ldd "$lib" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r dep; do
    [[ -e $base/$(basename "$dep") ]] || cp -L "$dep" "$base/"
  done
done
echo "check_wheel_base: $(ls "$base" | wc -l) base libraries in $system"
cat >"$work/check.py" <<'PY'
import os, sys, sysconfig
import stoker
batch = next(iter(stoker.Loader(sys.argv[1], 224, batch_size=8)))
assert batch.images.shape == (8, 224, 224, 3), batch.images.shape
libs = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line.split()[-1]})
paths = sysconfig.get_paths()
allowed = tuple(p + "/" for p in (sys.argv[2], paths["purelib"], paths["platlib"], sysconfig.get_config_var("LIBDIR"),
                                  os.path.join(os.path.dirname(os.__file__), "lib-dynload")))
outside = [lib for lib in libs if not lib.startswith(allowed)]
assert not outside, "loaded from outside the wheels, Python and the base set:\n" + "\n".join(outside)
carried = [lib for lib in libs if "/stoker.libs/" in lib]
assert carried, "nothing was loaded from the wheel's stoker.libs/"
print(f"check_wheel_base: first batch {batch.images.shape}; {len(libs)} libraries loaded, {len(carried)} from "
      "stoker.libs/, the others Python's, NumPy's or the base set")
PY
# /usr/local/lib first: once the system's folder is replaced, mount itself cannot start.
unshare -m sh -c "mount --bind '$base' /usr/local/lib && mount --bind '$base' '$system' && exec '$py' '$work/check.py' '$data' '$system'"
