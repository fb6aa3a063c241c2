#!/usr/bin/env python3
"""Zip a Lambda bootstrap deterministically: python3 zip.py BOOTSTRAP OUT.zip

One entry, `bootstrap` at the root, a regular file with mode 0755 made on
Unix, a fixed time (1980-01-01, zip's epoch) and deflate level 9: two zips
of the same binary are byte-identical, whoever builds them and when.
"""
import sys
import zipfile


def main(src, out):
    with open(src, "rb") as f:
        data = f.read()
    info = zipfile.ZipInfo("bootstrap", date_time=(1980, 1, 1, 0, 0, 0))
    info.create_system = 3  # Unix: unzip and Lambda honour the mode below
    info.external_attr = (0o100755 & 0xFFFF) << 16  # regular file, rwxr-xr-x
    info.compress_type = zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: zip.py BOOTSTRAP OUT.zip")
    main(sys.argv[1], sys.argv[2])
