#!/usr/bin/env python3
"""Checks qianka's layering rule over the source tree (ctest: layers.check).

The layers, lowest first, are QK_LAYERS in src/CMakeLists.txt, their one
definition. A file belongs to layer L when it is under src/L/ or include/qk/L/
(include/qccl*.h are qccl's; include/qk/qk.h, the umbrella, ranks as the
highest layer it includes). Every #include is resolved the way the compiler
does for that file, and the file is refused when it includes
  - a private header (src/M/...) of another layer M,
  - any header, public or private, of a layer above L,
  - a header of a layer QK_LAYERS does not list,
  - from a public header, any private header (public headers are installed,
    private ones are not), or test code from src/ or include/,
  - its own private headers spelled through src/ ("tensor/cpu/gemm.h" in
    src/tensor: write "cpu/gemm.h", relative to the layer's folder).
tests/L/ (and fuzz/, data's fuzz targets) may include L's private headers,
the helpers under tests/ and public headers; examples/ only public headers.
Layers listed but not written yet simply have no files.

  python3 tools/check_layers.py [--source-dir DIR]   # exit 1 and FILE:LINE: why, per violation
  python3 tools/check_layers.py --self-test          # the checker catches each kind of violation
"""
import argparse
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SOURCE_EXTS = (".h", ".hpp", ".cc", ".cpp", ".inc", ".cu", ".cuh")


def read_layers(root):
    cmake = os.path.join(root, "src", "CMakeLists.txt")
    with open(cmake) as f:
        m = re.search(r"set\(QK_LAYERS\s+([^)]*)\)", f.read())
    if not m:
        sys.exit(f"check_layers: no set(QK_LAYERS ...) in {cmake}: the layer order is defined there")
    return m.group(1).split()


class Checker:
    def __init__(self, root, layers):
        self.root = root
        self.layers = layers
        self.rank = {layer: i for i, layer in enumerate(layers)}
        self.problems = []
        self._umbrella_rank = None

    # ---- where a file belongs, and what an include names ----
    def owner(self, rel):
        """(kind, layer) of a repository file: kind is src, include, tests or examples."""
        parts = rel.split("/")
        if parts[0] == "src" and len(parts) > 2:
            return "src", parts[1]
        if parts[:2] == ["include", "qk"] and len(parts) > 3:
            return "include", parts[2]
        if parts[0] == "include" and len(parts) == 2 and parts[1].startswith("qccl"):
            return "include", "qccl"
        if rel == "include/qk/qk.h":
            return "include", "(umbrella)"
        if parts[0] == "tests" and len(parts) > 2:
            return "tests", parts[1]
        if parts[0] == "fuzz":
            return "tests", "data"
        if parts[0] == "examples":
            return "examples", None
        return None, None

    def search_roots(self, kind, layer):
        if kind == "src":
            return [f"src/{layer}", "include"]
        if kind == "include":
            # While layer L's own sources compile, src/L is on the path too: a public
            # header that reaches a private one that way breaks only for its users.
            return ["include", f"src/{layer}"]
        if kind == "tests":
            return ["tests", f"src/{layer}", "include", "fuzz"]
        return ["include"]

    def resolve(self, rel, kind, layer, quote, spelled):
        """The repository path an include names, or None for a system/third-party header."""
        candidates = []
        if quote == '"':
            candidates.append(os.path.normpath(os.path.join(os.path.dirname(rel), spelled)))
        candidates += [os.path.normpath(os.path.join(r, spelled)) for r in self.search_roots(kind, layer)]
        for c in candidates:
            if not c.startswith("..") and os.path.isfile(os.path.join(self.root, c)):
                return c
        if re.match(r"qk/[a-z_]+/", spelled):
            return "include/" + spelled  # generated (qk/base/version.h) or not written yet
        if os.path.isfile(os.path.join(self.root, "src", spelled)):
            return "src/" + spelled + "#via-src"  # "<layer>/..." through src/, on no layer's path
        return None

    def target_of(self, path):
        """(kind, layer) of an included path: public, private, test or umbrella."""
        parts = path.split("/")
        if path == "include/qk/qk.h":
            return "umbrella", None
        if parts[:2] == ["include", "qk"] and len(parts) > 3:
            return "public", parts[2]
        if parts[0] == "include" and len(parts) == 2 and parts[1].startswith("qccl"):
            return "public", "qccl"
        if parts[0] == "src" and len(parts) > 2:
            return "private", parts[1]
        if parts[0] in ("tests", "fuzz"):
            return "test", None
        return None, None

    def umbrella_rank(self):
        if self._umbrella_rank is None:
            self._umbrella_rank = -1
            path = os.path.join(self.root, "include/qk/qk.h")
            if os.path.isfile(path):
                for _, _, spelled in self.includes(path):
                    m = re.match(r"qk/([a-z_]+)/", spelled)
                    if m and m.group(1) in self.rank:
                        self._umbrella_rank = max(self._umbrella_rank, self.rank[m.group(1)])
        return self._umbrella_rank

    @staticmethod
    def includes(path):
        with open(path, errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if m:
                    yield n, m.group(1), m.group(2)

    # ---- the rule ----
    def check_file(self, rel):
        kind, layer = self.owner(rel)
        if kind is None or layer == "(umbrella)":
            return
        if kind in ("src", "include") and layer not in self.rank:
            self.problems.append(f"{rel}: layer '{layer}' is not in QK_LAYERS (src/CMakeLists.txt)")
            return
        for line, quote, spelled in self.includes(os.path.join(self.root, rel)):
            path = self.resolve(rel, kind, layer, quote, spelled)
            if path is None:
                continue
            via_src = path.endswith("#via-src")
            what, other = self.target_of(path.removesuffix("#via-src"))
            why = self.violation(kind, layer, what, other, spelled)
            if not why and via_src:
                why = (f"spelled through src/, which is on no include path: spell {layer}'s "
                       f"private headers relative to src/{layer}/")
            if why:
                close = '"' if quote == '"' else ">"
                self.problems.append(f"{rel}:{line}: #include {quote}{spelled}{close}: {why}")

    def violation(self, kind, layer, what, other, spelled):
        if what == "private" and other != layer:
            if kind == "tests":
                return (f"a private header of the {other} layer; tests/{layer} may include only "
                        f"src/{layer}'s private headers, spelled as inside the layer")
            if kind == "examples":
                return "a private header; examples use the public headers (include/) only"
            return (f"a private header of the {other} layer; use its public headers "
                    f"(include/qk/{other}/), adding there what it must offer")
        if kind == "include" and what == "private":
            return "a public header may not include a private one (private headers are not installed)"
        if kind in ("src", "include") and what == "test":
            return "test code, outside the libraries"
        if kind not in ("src", "include") or what not in ("public", "private", "umbrella"):
            return None
        if what == "umbrella":
            other_rank, other = self.umbrella_rank(), "the umbrella qk/qk.h"
        elif other not in self.rank:
            return f"the layer '{other}' is not in QK_LAYERS (src/CMakeLists.txt)"
        else:
            other_rank = self.rank[other]
        if other_rank > self.rank[layer]:
            return (f"{other} is above {layer} in the layer order "
                    f"({' < '.join(self.layers)}); a layer includes only layers below it")
        return None

    def run(self):
        for top in ("src", "include", "tests", "fuzz", "examples"):
            for dirpath, _, files in os.walk(os.path.join(self.root, top)):
                for name in sorted(files):
                    if name.endswith(SOURCE_EXTS):
                        rel = os.path.relpath(os.path.join(dirpath, name), self.root)
                        self.check_file(rel.replace(os.sep, "/"))
        return self.problems


def self_test():
    """Builds a small tree with one of each violation (and legal cases); all must be told apart."""
    files = {
        "src/CMakeLists.txt": "set(QK_LAYERS\n  base tensor autograd qccl later cli)\n",
        "include/qk/base/log.h": "#pragma once\n",
        "include/qk/tensor/tensor.h": '#include "qk/base/log.h"\n',
        "include/qk/tensor/bad_public.h": '#include "cpu/gemm.h"\n',
        "include/qk/autograd/autograd.h": '#include "qk/tensor/tensor.h"\n',
        "include/qk/qk.h": '#include "qk/autograd/autograd.h"\n',
        "include/qccl.h": "",
        "src/tensor/cpu/gemm.h": '#include "qk/tensor/tensor.h"\n',
        "src/tensor/cpu/gemm.cc": '#include "cpu/gemm.h"\n#include "gemm.h"\n#include <vector>\n',
        "src/tensor/up.cc": '#include "qk/autograd/autograd.h"\n',
        "src/tensor/umbrella.cc": '#include "qk/qk.h"\n',
        "src/base/qccl_user.cc": '#include "qccl.h"\n',
        "src/autograd/reach.cc": '#include "tensor/cpu/gemm.h"\n#include "qk/later/x.h"\n',
        "src/autograd/unknown.cc": '#include "qk/nolayer/x.h"\n',
        "src/cli/main.cc": '#include "qk/qk.h"\n#include "qk/autograd/autograd.h"\n',
        "src/cli/deep.cc": '#include "tensor/cpu/gemm.h"\n',
        "src/tensor/old_spelling.cc": '#include "tensor/cpu/gemm.h"\n',
        "tests/tensor/gemm_test.cc": '#include "cpu/gemm.h"\n#include "common/util.h"\n',
        "tests/common/util.h": "",
        "tests/autograd/reach_test.cc": '#include "tensor/cpu/gemm.h"\n#include "qk/autograd/autograd.h"\n',
        "examples/ex.cc": '#include "qk/qk.h"\n#include "tensor/cpu/gemm.h"\n',
    }
    expected = {  # file:line -> a word the message must contain
        "include/qk/tensor/bad_public.h:1": "public header may not include a private",
        "src/tensor/up.cc:1": "autograd is above tensor",
        "src/tensor/umbrella.cc:1": "umbrella",
        "src/base/qccl_user.cc:1": "qccl is above base",
        "src/autograd/reach.cc:1": "private header of the tensor layer",
        "src/autograd/reach.cc:2": "later is above autograd",
        "src/autograd/unknown.cc:1": "'nolayer' is not in QK_LAYERS",
        "src/cli/deep.cc:1": "private header of the tensor layer",
        "src/tensor/old_spelling.cc:1": "relative to src/tensor/",
        "tests/autograd/reach_test.cc:1": "tests/autograd may include only",
        "examples/ex.cc:2": "examples use the public headers",
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        problems = Checker(root, read_layers(root)).run()
    found = {p.split(": #include")[0]: p for p in problems}
    ok = True
    for where, word in expected.items():
        if where not in found or word not in found[where]:
            print(f"self-test: expected a violation at {where} mentioning '{word}', got: {found.get(where)}")
            ok = False
    for where, message in found.items():
        if where not in expected:
            print(f"self-test: unexpected violation: {message}")
            ok = False
    print("check_layers self-test: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source-dir", default=os.path.dirname(here), help="repository root")
    ap.add_argument("--self-test", action="store_true", help="check the checker on a synthetic tree")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    layers = read_layers(args.source_dir)
    problems = Checker(args.source_dir, layers).run()
    for p in problems:
        print(p)
    if problems:
        print(f"\n{len(problems)} include(s) break the layering rule (docs/architecture.md); "
              f"layers, lowest first: {' < '.join(layers)}")
        return 1
    print(f"layers ok: {' < '.join(layers)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
