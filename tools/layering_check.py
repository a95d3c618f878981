#!/usr/bin/env python3
"""Checks the project's layering rules (docs/ARCHITECTURE.md, Invariants) on the source tree.

(a) No daemon folder includes a header of, or links a library defined in, another daemon folder,
    and core/ includes or links no daemon's code: what two daemons share lives in core/.
(b) core/ uses no gRPC C++ (`#include <grpcpp/...>` or a generated `*.grpc.pb.h`, linking
    gRPC::grpc++ or the service stubs konn_proto_grpc) outside unit tests and test-support code,
    except the files listed in GRPCPP_IN_CORE below.

Prints one line per violation and exits 1 when there is any; run by ctest as lint.layering.
Usage: layering_check.py [--root DIR]
"""

import argparse
import os
import re
import sys

DAEMONS = ("proxy-server", "proxy-agent", "socks5", "kubeproxy-http")
SOURCE_EXTENSIONS = (".h", ".hpp", ".cc", ".cpp")

# Uses of gRPC C++ in core/ outside tests allowed as exceptions: none is left (issue 41). A new
# use fails the check.
GRPCPP_IN_CORE: set = set()

# Libraries that bring gRPC C++: the runtime, and the generated service stubs (the messages alone
# are konn_proto, which needs only protobuf).
GRPC_LIBRARIES = ("gRPC::grpc++", "konn_proto_grpc")

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
CALL_RE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")
LIBRARY_DEFINERS = ("konn_add_library", "add_library", "konn_proto_library")
LINKERS = ("konn_add_library", "konn_add_executable", "target_link_libraries")


def is_test_code(path):
    """Unit tests and test-support code: foo_test.cc, foo_test_peer.{h,cc}, fuzz targets."""
    name = os.path.basename(path)
    stem = os.path.splitext(name)[0]
    return stem.endswith("_test") or "_test_" in stem or stem.endswith("_fuzz")


def walk(root, top, want):
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if want(name):
                full = os.path.join(dirpath, name)
                yield os.path.relpath(full, root).replace(os.sep, "/"), full


def strip_cmake_comments(text):
    return "\n".join(re.sub(r"#.*", "", line) for line in text.splitlines())


def cmake_calls(text):
    """(command, [arguments]) for every call in a CMake file (parentheses balanced)."""
    text = strip_cmake_comments(text)
    for m in CALL_RE.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield m.group(1), text[m.end():i - 1].split()


def top_folder(include):
    parts = [p for p in include.split("/") if p not in ("", ".", "..")]
    return parts[0] if len(parts) > 1 else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    root = os.path.abspath(parser.parse_args().root)
    errors = []
    guarded = DAEMONS + ("core",)

    # Which folder defines each library.
    owner = {}
    for top in guarded:
        for rel, full in walk(root, top, lambda n: n == "CMakeLists.txt"):
            with open(full, encoding="utf-8") as f:
                for command, args in cmake_calls(f.read()):
                    if command in LIBRARY_DEFINERS and args:
                        owner[args[0]] = top

    # (a) includes, and (b) grpcpp includes in core/.
    grpc_used = set()
    for top in guarded:
        for rel, full in walk(root, top, lambda n: n.endswith(SOURCE_EXTENSIONS)):
            with open(full, encoding="utf-8", errors="replace") as f:
                text = f.read()
            for include in INCLUDE_RE.findall(text):
                other = top_folder(include)
                if other in DAEMONS and other != top:
                    errors.append(f"{rel}: includes {include}, a header of the {other} daemon "
                                  "(move what is shared to core/)")
                grpc = include.startswith("grpcpp/") or include.endswith(".grpc.pb.h")
                if top == "core" and grpc and not is_test_code(rel):
                    grpc_used.add(rel)

    # (a) links, and (b) gRPC::grpc++ linked by a core/ library.
    for top in guarded:
        for rel, full in walk(root, top, lambda n: n == "CMakeLists.txt"):
            with open(full, encoding="utf-8") as f:
                calls = list(cmake_calls(f.read()))
            for command, args in calls:
                if command not in LINKERS or not args:
                    continue
                target = args[0]
                for arg in args[1:]:
                    other = owner.get(arg)
                    if other in DAEMONS and other != top:
                        errors.append(f"{rel}: {target} links {arg}, a library of the {other} "
                                      "daemon (move what is shared to core/)")
                    if (top == "core" and arg in GRPC_LIBRARIES and
                            not target.endswith("_tests")):
                        grpc_used.add(f"{rel}:{target}")

    for use in sorted(grpc_used - GRPCPP_IN_CORE):
        errors.append(f"{use}: gRPC C++ in core/ outside tests (rule b); use core/h2 instead, "
                      "the GRPCPP_IN_CORE list in tools/layering_check.py must only shrink")
    for stale in sorted(GRPCPP_IN_CORE - grpc_used):
        errors.append(f"{stale}: no longer uses gRPC C++; remove it from GRPCPP_IN_CORE in "
                      "tools/layering_check.py")

    for e in errors:
        print(e)
    if errors:
        print(f"layering check: {len(errors)} violation(s)", file=sys.stderr)
        return 1
    print(f"layering check: OK ({len(owner)} libraries, {len(GRPCPP_IN_CORE)} gRPC C++ uses "
          "left in core/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
