#!/usr/bin/env python3
"""Proves lint_dockerfiles.py can fail: copies docker/ to a temp dir, breaks one rule at a
time, and expects exit 1 with the file and the rule named. Last, a classic bad one-stage
Dockerfile must trip every final-stage rule at once.

  tests/docker/test_lint_fails.py docker/
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

LINT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lint_dockerfiles.py")

# (file, regex, replacement, rule expected in the output)
BREAKS = [
    ("Dockerfile.cpu", r"^USER libnn$", "USER root", "user"),
    ("Dockerfile.gpu", r"^USER libnn\n", "", "user"),
    ("Dockerfile.gpu", r"--no-install-recommends", "", "apt"),
    ("Dockerfile.cpu", r" && rm -rf /var/lib/apt/lists/\*", "", "apt"),
    ("Dockerfile.cpu", r"debian:12-slim AS runtime", "debian:latest AS runtime", "base-tag"),
    ("Dockerfile.cpu", r"debian:12-slim AS build", "debian AS build", "base-tag"),
    ("Dockerfile.gpu", r"^ARG CUDA_VERSION=.*$", "ARG CUDA_VERSION", "base-tag"),
    ("Dockerfile.cpu", r" AS build$", "", "stages"),
    ("Dockerfile.cpu", r"^COPY --from=build .*$", "COPY . /opt/libnn", "copy-from"),
    ("Dockerfile.gpu", r"^COPY --from=build .*$", "COPY . /opt/libnn", "copy-from"),  # data: not enough
    ("Dockerfile.cpu", r"^ENTRYPOINT .*$", "", "entrypoint"),
    ("Dockerfile.gpu", r"^ENTRYPOINT .*$", "ENTRYPOINT /usr/local/bin/libnn-entrypoint", "entrypoint"),
    ("Dockerfile.cpu", r"^ENTRYPOINT .*$", 'ENTRYPOINT ["/usr/local/bin/libnn-entrypoint"]', "entrypoint"),
    ("Dockerfile.gpu", r" tini zlib1g", " zlib1g", "entrypoint"),
    ("Dockerfile.cpu", r"-DLIBNN_NATIVE=OFF", "-DLIBNN_NATIVE=ON", "native"),
    ("Dockerfile.gpu", r"-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_BUILD_TYPE=Release -march=native", "native"),
    ("Dockerfile.gpu", r"^ARG CUDA_ARCHS=.*$", "", "cuda-args"),
    ("Dockerfile.gpu", r"\$\{CUDA_ARCHS\}", "90", "cuda-args"),
    ("Dockerfile.gpu", r"cudnn-runtime-ubuntu", "runtime-ubuntu", "cuda-base"),
    ("Dockerfile.gpu", r"V100", "old GPUs", "cuda-notes"),
    ("Dockerfile.gpu", r"CUDA_ARCHS=90", "CUDA_ARCHS=80", "cuda-notes"),
    ("entrypoint.sh", r"\Z", "\nif then\n", "entrypoint-script"),
    ("entrypoint.sh", r'^exec "\$@"$', "exit 0", "entrypoint-behaviour"),
]

BAD_DOCKERFILE = """FROM ubuntu
RUN apt-get update && apt-get install -y g++ cmake
COPY . /src
RUN cmake -S /src -B /src/build && cmake --build /src/build
CMD /src/build/bin/mnist_train
"""


def lint(d):
    p = subprocess.run([sys.executable, LINT, d], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    src = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "docker")
        shutil.copytree(src, d)
        code, out = lint(d)
        if code != 0:
            sys.exit(f"test_lint_fails: the unbroken copy of {src} must pass first:\n{out}")
        for name, pattern, repl, rule in BREAKS:
            path = os.path.join(d, name)
            good = open(path).read()
            bad, n = re.subn(pattern, repl, good, count=1, flags=re.M)
            if n == 0:
                failures.append(f"{name}: /{pattern}/ no longer matches; update this test")
                continue
            open(path, "w").write(bad)
            code, out = lint(d)
            open(path, "w").write(good)
            if code != 1 or f"{name}:" not in out or f"[{rule}]" not in out:
                failures.append(f"{name} with /{pattern}/ -> {repl!r}: expected exit 1 naming "
                                f"{name} and [{rule}], got exit {code}:\n{out}")
        os.chmod(os.path.join(d, "entrypoint.sh"), 0o644)
        code, out = lint(d)
        if code != 1 or "not executable" not in out:
            failures.append(f"entrypoint.sh without +x: expected [entrypoint-script], got {code}:\n{out}")
        os.chmod(os.path.join(d, "entrypoint.sh"), 0o755)

        open(os.path.join(d, "Dockerfile.cpu"), "w").write(BAD_DOCKERFILE)
        code, out = lint(d)
        for rule in ("stages", "base-tag", "apt", "user", "copy-from", "path", "entrypoint", "native",
                     "build"):
            if code != 1 or "Dockerfile.cpu:" not in out or f"[{rule}]" not in out:
                failures.append(f"broken Dockerfile.cpu: expected exit 1 and [{rule}], got {code}:\n{out}")
    for f in failures:
        print("FAIL", f)
    total = len(BREAKS) + 2
    print(f"test_lint_fails: {total - len(failures)} of {total} broken variants caught")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
