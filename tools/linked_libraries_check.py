#!/usr/bin/env python3
"""The daemons load only the shared libraries they use (issue 42).

For each program given: every library it records as NEEDED must define at least one symbol the
program takes from a shared library (what -Wl,--as-needed guarantees: a library named by a
static library of ours but never called is not loaded, relocated and paid for in RSS on every
node). That no daemon loads gRPC C++ at all is lint.daemon_links (tools/daemon_links_check.py).

    linked_libraries_check.py PROGRAM...
"""
import re
import subprocess
import sys


def run(*argv):
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def symbols(path, which):
    out = run("nm", "-D", which, path)
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def copied(path):
    """Data symbols the program copies from a library at start (R_X86_64_COPY, a library's global
    object): defined in the program, yet they make the library needed."""
    out = run("readelf", "-rW", path)
    return {m.split("@")[0] for m in re.findall(r"R_X86_64_COPY\s+\S+\s+(\S+)", out)}


def main(argv):
    programs = argv
    if not programs:
        print(__doc__, file=sys.stderr)
        return 2
    failures = []
    for prog in programs:
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run("readelf", "-d", prog))
        where = dict(re.findall(r"^\s*(\S+) => (\S+)", run("ldd", prog), re.M))
        wanted = symbols(prog, "--undefined-only") | copied(prog)
        for lib in needed:
            if lib not in where:
                continue  # the dynamic loader itself (ld-linux), named by path
            if not wanted & symbols(where[lib], "--defined-only"):
                failures.append(f"{prog}: records {lib} but takes no symbol from it")
        print(f"{prog}: {len(needed)} libraries recorded")
    for f in failures:
        print("FAIL " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
