#!/usr/bin/env python3
"""Writes the tar test vectors of tests/pipeline/vectors/tar/ with Python's tarfile, so the C++
tar index is checked against another implementation's PAX, GNU and ustar output.

Every image is a 4x4 binary PPM whose pixel (y, x) of sample i is (40*i + 10*x, 20*y, 200 - i),
the label of sample i is i % 3 (classes.txt: red, green, blue). Run from the repository root:
    python3 scripts/make_tar_vectors.py
"""
import io
import os
import tarfile

OUT = os.path.join("tests", "pipeline", "vectors", "tar")
MTIME = 1700000000


def ppm(i):
    rows = bytearray()
    for y in range(4):
        for x in range(4):
            rows += bytes(((40 * i + 10 * x) % 256, 20 * y, 200 - i))
    return b"P6\n4 4\n255\n" + bytes(rows)


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = MTIME
    info.mode = 0o644
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def write(path, fmt, samples, pax_headers=None, folder=True):
    kwargs = {"format": fmt}
    if pax_headers:
        kwargs["pax_headers"] = pax_headers  # a global ('g') header at the start
    with tarfile.open(os.path.join(OUT, path), "w", **kwargs) as tar:
        if folder:
            info = tarfile.TarInfo("samples")
            info.type = tarfile.DIRTYPE
            info.mtime = MTIME
            info.mode = 0o755
            tar.addfile(info)  # a directory member: passed over by the index
        for key, i, with_label in samples:
            add(tar, key + ".ppm", ppm(i))
            if with_label:
                add(tar, key + ".cls", b"%d" % (i % 3))


def main():
    os.makedirs(OUT, exist_ok=True)
    long_dir = "samples/" + "a_rather_long_folder_name_" * 4  # > 100 characters with the file name
    # PAX: a global header, a name over 100 characters (an 'x' header carries it), a non-ASCII name.
    write("pax.tar", tarfile.PAX_FORMAT,
          [("samples/s000", 0, True), (long_dir + "/s001", 1, True), ("samples/s\u00e9002", 2, True)],
          pax_headers={"comment": "stoker test vector"})
    # GNU: a name over 100 characters in an 'L' long-name member.
    write("gnu.tar", tarfile.GNU_FORMAT, [("samples/s003", 3, True), (long_dir + "/s004", 4, True)])
    # ustar: a name over 100 characters split into prefix and name.
    write("ustar.tar", tarfile.USTAR_FORMAT, [(long_dir + "/s005", 5, True), ("s006", 6, True)], folder=False)
    # A sample without a label between two good ones.
    write("nolabel.tar", tarfile.USTAR_FORMAT, [("s007", 7, True), ("s008", 8, False), ("s009", 9, True)],
          folder=False)
    with open(os.path.join(OUT, "classes.txt"), "w") as f:
        f.write("red\ngreen\nblue\n")


if __name__ == "__main__":
    main()
