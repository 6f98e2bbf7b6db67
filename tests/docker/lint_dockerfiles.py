#!/usr/bin/env python3
"""Checks docker/Dockerfile.cpu, docker/Dockerfile.gpu and docker/entrypoint.sh against the
project's image rules. No Docker engine (and no hadolint) runs where the tests run, so this
is what keeps the images from rotting between the times someone builds them.

  tests/docker/lint_dockerfiles.py docker/

Prints one line per problem, `FILE:LINE: [rule] what is wrong`, and exits 1 if there is any.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass


@dataclass
class Instr:
    line: int
    keyword: str
    args: str


def parse(text):
    """Dockerfile -> (instructions, comment lines). Continuation lines are joined, and
    comment lines inside a continuation are dropped, as Docker does."""
    instrs, comments, buf, start = [], [], None, 0
    for n, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if s.startswith("#"):
            comments.append((n, s))
            continue
        if not s:
            continue
        if buf is None:
            buf, start = "", n
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        keyword, _, args = (buf + s).strip().partition(" ")
        instrs.append(Instr(start, keyword.upper(), args.strip()))
        buf = None
    return instrs, comments


class Linter:
    def __init__(self):
        self.problems = []

    def fail(self, path, line, rule, message):
        where = f"{path}:{line}" if line else path  # line 0: the file as a whole
        self.problems.append(f"{where}: [{rule}] {message}")

    def dockerfile(self, path, gpu):
        if not os.path.isfile(path):
            self.fail(path, 0, "files", "missing")
            return
        instrs, comments = parse(open(path, encoding="utf-8").read())
        global_args = {}
        for ins in instrs:
            if ins.keyword == "FROM":
                break
            if ins.keyword == "ARG":
                name, eq, default = ins.args.partition("=")
                if eq:  # an ARG without a default leaves FROM to the caller's --build-arg
                    global_args[name] = default.strip('"')
        stages = []  # [(from instr, stage name, instrs of the stage)]
        for ins in instrs:
            if ins.keyword == "FROM":
                m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", ins.args, re.I)
                stages.append((ins, m.group(2) if m else None, []))
            elif stages:
                stages[-1][2].append(ins)
        self.stages(path, stages, global_args)
        for ins in instrs:
            if ins.keyword == "RUN":
                self.run(path, ins)
        if stages:
            self.final_stage(path, stages)
        self.build_flags(path, instrs)
        if gpu:
            self.cuda(path, instrs, stages, global_args, comments)

    def stages(self, path, stages, global_args):
        if len(stages) < 2:
            self.fail(path, stages[0][0].line if stages else 0, "stages",
                      f"needs a build stage and a runtime stage, found {len(stages)} FROM")
        names = []
        for ins, name, _ in stages:
            if not name:
                self.fail(path, ins.line, "stages", f"FROM {ins.args}: name the stage with AS")
            image = (re.sub(r"^--platform=\S+\s+", "", ins.args).split() or [""])[0]
            earlier, names = image in names, names + [name]
            if earlier:  # FROM an earlier stage: no tag to check
                continue
            resolved = re.sub(r"\$\{(\w+)\}|\$(\w+)",
                              lambda m: global_args.get(m.group(1) or m.group(2), "\0"), image)
            if "\0" in resolved:
                self.fail(path, ins.line, "base-tag",
                          f"{image}: uses an ARG with no default declared before the first FROM")
                continue
            if "@sha256:" in resolved:
                continue
            tag = resolved.rsplit("/", 1)[-1].partition(":")[2]
            if not tag or tag == "latest":
                what = "latest" if tag else "an untagged (latest) image"
                self.fail(path, ins.line, "base-tag", f"{resolved}: pin a version tag, not {what}")

    def run(self, path, ins):
        cmd = ins.args
        if "apt-get install" in cmd or "apt install" in cmd:
            for needed in ("--no-install-recommends", "rm -rf /var/lib/apt/lists/*", "apt-get update"):
                if needed not in cmd:
                    self.fail(path, ins.line, "apt",
                              f"RUN with apt-get install lacks '{needed}' in the same RUN")
        if "-march=native" in cmd:
            self.fail(path, ins.line, "native", "-march=native makes the image run only on the builder's CPU")

    def final_stage(self, path, stages):
        ins, _, body = stages[-1]
        build = stages[0][1] if len(stages) > 1 else None  # the first stage builds
        users = [i for i in body if i.keyword == "USER"]
        if not users:
            self.fail(path, ins.line, "user", "the final stage sets no USER, so it runs as root")
        elif re.fullmatch(r"(root|0)(:.*)?", users[-1].args):
            self.fail(path, users[-1].line, "user", f"the final stage runs as '{users[-1].args}'")
        copies = [i for i in body if i.keyword == "COPY"]
        if not any(m and build and m.group(1) == build
                   for m in (re.search(r"--from=(\S+)", i.args) for i in copies)):
            self.fail(path, ins.line, "copy-from",
                      f"the final stage has no COPY --from={build or '<build stage>'}: it should get "
                      "the installed tree from the build stage, not build itself")
        env = " ".join(i.args for i in body if i.keyword == "ENV")
        if "/opt/libnn/bin" not in env:
            self.fail(path, ins.line, "path", "the final stage does not put /opt/libnn/bin on PATH")
        entry = [i for i in body if i.keyword == "ENTRYPOINT"]
        if not entry:
            self.fail(path, ins.line, "entrypoint", "the final stage has no ENTRYPOINT")
            return
        try:
            argv = json.loads(entry[-1].args)
        except json.JSONDecodeError:
            argv = None
        if not isinstance(argv, list) or not argv:
            self.fail(path, entry[-1].line, "entrypoint",
                      "use the exec form ENTRYPOINT [\"...\"] so signals reach the program")
            return
        if argv[:2] != ["/usr/bin/tini", "--"] or len(argv) != 3:
            self.fail(path, entry[-1].line, "entrypoint",
                      "run the entrypoint under tini (ENTRYPOINT [\"/usr/bin/tini\", \"--\", ...]): a "
                      "program that is PID 1 ignores the signals it has no handler for")
            return
        installs = " ".join(i.args for i in body if i.keyword == "RUN")
        if not re.search(r"\btini\b", installs):
            self.fail(path, entry[-1].line, "entrypoint", "the final stage does not install tini")
        if not any(i.args.split()[-1] == argv[2] and "entrypoint.sh" in i.args for i in copies):
            self.fail(path, entry[-1].line, "entrypoint",
                      f"ENTRYPOINT {argv[2]} is not docker/entrypoint.sh copied into the final stage")

    def build_flags(self, path, instrs):
        runs = " ".join(i.args for i in instrs if i.keyword == "RUN")
        for needed in ("-G Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DLIBNN_NATIVE=OFF",
                       "cmake --install build --prefix /opt/libnn"):
            if needed not in runs:
                self.fail(path, 0, "native" if "NATIVE" in needed else "build",
                          f"no RUN has '{needed}'")

    def cuda(self, path, instrs, stages, global_args, comments):
        args = {i.args.partition("=")[0]: i for i in instrs if i.keyword == "ARG"}
        for name in ("CUDA_VERSION", "CUDA_ARCHS"):
            if name not in args:
                self.fail(path, 0, "cuda-args",
                          f"no 'ARG {name}' (CUDA release and GPU architectures are build ARGs)")
        runs = " ".join(i.args for i in instrs if i.keyword == "RUN")
        if not re.search(r"-DCMAKE_CUDA_ARCHITECTURES=\$\{?CUDA_ARCHS\b", runs):
            self.fail(path, 0, "cuda-args", "CMAKE_CUDA_ARCHITECTURES is not set from ${CUDA_ARCHS}")
        # NVIDIA's tag scheme: <X.Y.Z>-cudnn-<devel|runtime>-ubuntu<YY.MM>
        ends = (stages[0], stages[-1]) if len(stages) >= 2 else ()
        for (ins, _, _), kind in zip(ends, ("devel", "runtime")):
            image = ins.args.split()[0]
            if not re.fullmatch(r"nvidia/cuda:\$\{CUDA_VERSION\}-cudnn-" + kind + r"-ubuntu\d\d\.\d\d", image):
                self.fail(path, ins.line, "cuda-base",
                          f"expected FROM nvidia/cuda:${{CUDA_VERSION}}-cudnn-{kind}-ubuntuYY.MM, got {image}")
        default = global_args.get("CUDA_VERSION")
        if "CUDA_VERSION" in args and not re.fullmatch(r"\d+\.\d+\.\d+", default or ""):
            self.fail(path, args["CUDA_VERSION"].line, "cuda-base",
                      f"CUDA_VERSION default '{default}' is not NVIDIA's X.Y.Z tag form")
        text = "\n".join(c for _, c in comments)
        notes = {"V100 (sm_70) needs CUDA 12.x: a comment with V100, sm_70 and CUDA_VERSION=12.":
                 ("V100", "sm_70", "CUDA_VERSION=12.", "CUDA_ARCHS=70", "CUDA 13"),
                 "Hopper: a comment with H100 and CUDA_ARCHS=90": ("H100", "CUDA_ARCHS=90")}
        for what, words in notes.items():
            missing = [w for w in words if w not in text]
            if missing:
                self.fail(path, 0, "cuda-notes", f"{what} (missing {', '.join(missing)})")

    def entrypoint(self, path):
        if not os.path.isfile(path):
            self.fail(path, 0, "entrypoint-script", "missing")
            return
        if not os.access(path, os.X_OK):
            self.fail(path, 0, "entrypoint-script", "not executable (chmod +x; COPY keeps the mode)")
        p = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
        if p.returncode:
            self.fail(path, 0, "entrypoint-script", "bash -n: " + p.stderr.strip().replace("\n", "; "))
            return
        if shutil.which("shellcheck"):
            p = subprocess.run(["shellcheck", "-f", "gcc", path], capture_output=True, text=True)
            for line in p.stdout.splitlines():
                self.fail(path, 0, "entrypoint-script", "shellcheck: " + line)
        self.entrypoint_behaviour(path)

    def entrypoint_behaviour(self, path):
        """Runs the dispatcher against a fake /opt/libnn with one program in it."""
        with tempfile.TemporaryDirectory() as home:
            os.mkdir(os.path.join(home, "bin"))
            prog = os.path.join(home, "bin", "fake_train")
            with open(prog, "w") as f:
                f.write('#!/bin/sh\necho "fake_train got $*"\n')
            os.chmod(prog, 0o755)
            env = dict(os.environ, LIBNN_HOME=home, PATH=os.path.join(home, "bin") + ":/usr/bin:/bin")
            cases = [([], 0, "fake_train"), (["fake_train", "--epochs", "3"], 0, "fake_train got --epochs 3"),
                     (["--epochs"], 2, "name a program"), (["no_such_program"], 127, "no program")]
            for argv, code, text in cases:
                p = subprocess.run(["bash", path] + argv, capture_output=True, text=True, env=env)
                if p.returncode != code or text not in p.stdout + p.stderr:
                    self.fail(path, 0, "entrypoint-behaviour",
                              f"`entrypoint.sh {' '.join(argv)}` should exit {code} and print '{text}', "
                              f"got exit {p.returncode}: {(p.stdout + p.stderr).strip()[:200]!r}")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: lint_dockerfiles.py DOCKER_DIR")
    d = sys.argv[1]
    lint = Linter()
    lint.dockerfile(os.path.join(d, "Dockerfile.cpu"), gpu=False)
    lint.dockerfile(os.path.join(d, "Dockerfile.gpu"), gpu=True)
    lint.entrypoint(os.path.join(d, "entrypoint.sh"))
    for p in lint.problems:
        print(p)
    if lint.problems:
        print(f"docker lint: {len(lint.problems)} problem(s) in {d}")
        return 1
    print(f"docker lint: Dockerfile.cpu, Dockerfile.gpu and entrypoint.sh in {d} pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
