#!/usr/bin/env python3
"""Checks that no daemon binary links gRPC C++ (docs/ARCHITECTURE.md, Invariants).

Runs `ldd` on each binary given and fails when it needs a shared library of gRPC (libgrpc++,
libgrpc, libgpr and their kin), of Abseil (libabsl_*, which only gRPC brings in) or the full
Protobuf runtime (libprotobuf): the daemons speak gRPC on core/h2, and protobuf-lite
(libprotobuf-lite) is all they need for the messages. gRPC C++ stays in tests/, test-client/ and
bench/.

Prints one line per offending library and exits 1 when there is any (or when a binary is missing
or ldd fails); run by ctest as lint.daemon_links on the four daemons.
Usage: daemon_links_check.py BINARY...
"""

import os
import re
import subprocess
import sys

# A needed library's soname: gRPC's own (libgrpc++, libgrpc, libgrpc_unsecure, libgpr,
# libaddress_sorting, libupb), Abseil's, and the full Protobuf runtime (not libprotobuf-lite).
FORBIDDEN = re.compile(r"^(libgrpc|libgpr|libaddress_sorting|libupb|libabsl_|libprotobuf\.so)")


def needed(binary):
    """The sonames ldd lists for `binary` (direct and indirect), or raises RuntimeError."""
    r = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"ldd {binary} failed: {(r.stderr or r.stdout).strip()}")
    names = []
    for line in r.stdout.splitlines():
        line = line.strip()
        if not line:
            continue
        names.append(os.path.basename(line.split()[0]))
    return names


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    errors = []
    for binary in argv:
        name = os.path.basename(binary)
        if not os.path.isfile(binary):
            errors.append(f"{name}: no such binary {binary} (build it first)")
            continue
        try:
            libs = needed(binary)
        except RuntimeError as e:
            errors.append(f"{name}: {e}")
            continue
        bad = sorted({lib for lib in libs if FORBIDDEN.match(lib)})
        for lib in bad:
            errors.append(f"{name}: links {lib} (gRPC C++, Abseil or full Protobuf; daemons use "
                          "core/h2 and protobuf-lite)")
        if not bad:
            print(f"{name}: OK ({len(libs)} libraries, no gRPC C++, Abseil or full Protobuf)")
    for e in errors:
        print(e)
    if errors:
        print(f"daemon links check: {len(errors)} problem(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
