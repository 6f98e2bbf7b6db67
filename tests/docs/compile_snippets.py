#!/usr/bin/env python3
"""Compiles and runs every ```cpp block of a Markdown file against the built libnn.

Each block is a whole program. All blocks go into one translation unit (compiling once is
much faster than once per block): each block's #include lines are hoisted to the top, its
body is wrapped in its own namespace and its main() renamed, and a generated main() runs
them in order. A block that fails to compile, or whose main returns non-zero, fails the test.

  compile_snippets.py DOC.md --cxx c++ --include DIR --lib DIR --work DIR [--std c++17]

A main() may end without a return, as a C++ main() may: the renamed function gets a
`return 0;` before its closing brace, as main() has implicitly.
"""
import argparse
import os
import re
import subprocess
import sys


def with_return(body, doc, i):
    """body with `return 0;` put before the closing brace of snippet_main()."""
    start = body.index("{", body.index("int snippet_main("))
    depth = 0
    for j in range(start, len(body)):
        depth += {"{": 1, "}": -1}.get(body[j], 0)
        if depth == 0:
            return body[:j] + "  return 0;\n" + body[j:]
    sys.exit(f"{doc}: block {i + 1}: main() has no closing brace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("doc")
    ap.add_argument("--cxx", default="c++")
    ap.add_argument("--include", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--std", default="c++20")
    a = ap.parse_args()
    text = open(a.doc, encoding="utf-8").read()
    blocks = re.findall(r"```cpp\n(.*?)```", text, re.S)
    if not blocks:
        sys.exit(f"{a.doc}: no ```cpp blocks found")
    includes, bodies = [], []
    for i, block in enumerate(blocks):
        lines = block.splitlines()
        incs = [l for l in lines if l.startswith("#include")]
        rest = [l for l in lines if not l.startswith("#include")]
        body = "\n".join(rest)
        if not re.search(r"\bint main\s*\(", body):
            sys.exit(f"{a.doc}: block {i + 1} has no main()")
        body = re.sub(r"\bint main\s*\(", "int snippet_main(", body, count=1)
        body = with_return(body, a.doc, i)
        includes += [l for l in incs if l not in includes]
        bodies.append(f"namespace snippet_{i + 1} {{\n{body}\n}}  // namespace snippet_{i + 1}\n")
    calls = "\n".join(
        f'  if (int rc = snippet_{i + 1}::snippet_main()) {{ std::printf("block {i + 1} returned %d\\n", rc); return 1; }}'
        for i in range(len(blocks)))
    src = "\n".join(includes + ["#include <cstdio>", ""] + bodies +
                    ["int main() {", calls, f'  std::printf("{len(blocks)} blocks ran\\n");', "  return 0;", "}"])
    os.makedirs(a.work, exist_ok=True)
    path = os.path.join(a.work, "doc_snippets.cpp")
    exe = os.path.join(a.work, "doc_snippets")
    open(path, "w").write(src)
    cmd = [a.cxx, f"-std={a.std}", "-O1", "-I", a.include, path, "-o", exe, "-L", a.lib, "-lnn",
           f"-Wl,-rpath,{a.lib}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-6000:])
        sys.exit(f"{a.doc}: the code blocks do not compile (source: {path})")
    r = subprocess.run([exe], capture_output=True, text=True, timeout=600)
    sys.stdout.write(r.stdout[-3000:])
    sys.stderr.write(r.stderr[-3000:])
    if r.returncode != 0:
        sys.exit(f"{a.doc}: a code block failed when run")


if __name__ == "__main__":
    main()
