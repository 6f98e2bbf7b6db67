#!/usr/bin/env python3
"""A hyperparameter sweep over any libnn app: every combination of the --grid values, each
run in its own folder with its metrics, log and checkpoints, then a table of the results.

    scripts/sweep.py --out runs/sweep1 --grid lr=1e-3,3e-3 --grid hidden=128,256 -- \\
        build/bin/mlp_train --data synthetic --epochs 3

Each run gets the app's flags plus --NAME=VALUE for each grid flag (one word, so Bool flags
work too: --grid augment=true,false), and --metrics RUN/metrics.jsonl, --checkpoint-dir
RUN/ckpt --resume; RUN/command is its command line, RUN/log its output. A --tensorboard DIR
among the app's flags becomes DIR/RUN for each run, so TensorBoard shows the runs side by side
(`tensorboard --logdir DIR`) instead of one run of interleaved curves. So the sweep can be
stopped at any time and started again with the same command: finished runs are skipped, an
interrupted one resumes from its last checkpoint (SIGTERM, SIGINT or SIGHUP to the sweep
stops its runs gracefully: they get SIGINT for a SIGINT, else SIGTERM, and checkpoint before
they exit). In the table a run is done, failed, partial (it has metrics or a checkpoint: run
the sweep again to go on) or not run.

Many machines: give each one --shard I/N (I from 0) with --out on a shared file system;
shard I takes runs I, I+N, I+2N, ... Any machine can then print the whole table with
--summary (the grid is the one the sweep last recorded in --out/grid.json; --grid flags
given with --summary override it). --jobs K runs K at once on this machine (OMP_NUM_THREADS is divided among them
unless set)."""
import argparse
import ctypes
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

SAFE = re.compile(r"[^A-Za-z0-9.+-]")
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def child_setup():
    """In each run, before exec: stop signals unblocked (the sweep blocks them around
    starting a run), and SIGTERM (a graceful stop) when the sweep dies without passing
    anything on (SIGKILL), instead of running on orphaned."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def parse_grid(items):
    grid = []
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip().lstrip("-")
        vals = [v.strip() for v in values.split(",")]
        if not sep or not name or not any(vals):
            sys.exit(f"sweep: --grid must be NAME=V1,V2,..., got '{item}'")
        if not all(vals):
            sys.exit(f"sweep: --grid {name} has an empty value: '{item}'")
        for v in vals:
            if vals.count(v) > 1:
                sys.exit(f"sweep: --grid {name} lists the value '{v}' twice")
        if any(n == name for n, _ in grid):
            sys.exit(f"sweep: --grid {name} given twice")
        grid.append((name, vals))
    return grid


def per_run_tensorboard(cmd, name):
    """cmd with its --tensorboard DIR (or --tensorboard=DIR) made DIR/name."""
    out = list(cmd)
    for i, c in enumerate(out):
        if c == "--tensorboard" and i + 1 < len(out):
            out[i + 1] = os.path.join(out[i + 1], name)
        elif c.startswith("--tensorboard="):
            out[i] = "--tensorboard=" + os.path.join(c[len("--tensorboard="):], name)
    return out


def run_name(combo):
    return "_".join(f"{SAFE.sub('_', n)}={SAFE.sub('_', v)}" for n, v in combo) or "run"


def last_metrics(path):
    """The last JSON line of a metrics file, or None."""
    try:
        with open(path) as f:
            lines = [l for l in f.read().splitlines() if l.strip()]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def has_checkpoint(d):
    """Whether folder d holds a checkpoint (a run stopped before its first epoch ended has
    one but no metrics yet). A half-written one is named ckpt-*.safetensors.tmp-PID."""
    try:
        return any(n.startswith("ckpt-") and n.endswith(".safetensors") for n in os.listdir(d))
    except OSError:
        return False


def combinations(grid):
    """Every run of the grid: a tuple of (flag, value) pairs each, in --grid order."""
    return [tuple(zip([n for n, _ in grid], vals)) for vals in itertools.product(*[v for _, v in grid])]


def has_flag(cmd, name):
    """Whether the command line gives --name (as --name VALUE or --name=VALUE)."""
    return any(c == f"--{name}" or c.startswith(f"--{name}=") for c in cmd)


def signal_group(group, sig):
    """sig to a run's process group (its session's): what it started, through a wrapper script
    say, stops too. SIGTERM for a SIGHUP: the same graceful stop, whatever a run does with
    SIGHUP."""
    try:
        os.killpg(group, signal.SIGTERM if sig == signal.SIGHUP else sig)
    except ProcessLookupError:  # (all of it ended)
        pass


def group_alive(group):
    try:
        os.killpg(group, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def summary(out, grid):
    rows = []
    for combo in combinations(grid):
        d = os.path.join(out, run_name(combo))
        m = last_metrics(os.path.join(d, "metrics.jsonl"))
        status = "done" if os.path.exists(os.path.join(d, "done")) else \
                 "failed" if os.path.exists(os.path.join(d, "failed")) else \
                 "partial" if m or has_checkpoint(os.path.join(d, "ckpt")) else "not run"
        rows.append((combo, status, m or {}))
    def key(r):
        acc = r[2].get("val_accuracy")
        return (0 if isinstance(acc, (int, float)) else 1, -(acc or 0) if isinstance(acc, (int, float)) else 0)
    rows.sort(key=key)
    names = [n for n, _ in grid]
    head = names + ["status", "epoch", "train_loss", "val_loss", "val_accuracy", "samples/s"]
    fmt = lambda v, f: "-" if v is None else (f % v if isinstance(v, (int, float)) else str(v))
    table = [head]
    for combo, status, m in rows:
        table.append([v for _, v in combo] + [status, fmt(m.get("epoch"), "%d"), fmt(m.get("train_loss"), "%.4f"),
                     fmt(m.get("val_loss"), "%.4f"), fmt(m.get("val_accuracy"), "%.4f"),
                     fmt(m.get("samples_per_second"), "%.0f")])
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return rows


GRID_FILE = "grid.json"  # in --out: the sweep's grid, which --summary reads back


def load_grid(out):
    try:
        with open(os.path.join(out, GRID_FILE)) as f:
            return [(n, list(v)) for n, v in json.load(f)]
    except OSError:
        return None
    except (ValueError, TypeError):
        sys.exit(f"sweep: {os.path.join(out, GRID_FILE)} is not a sweep's grid")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder of the sweep: one sub-folder per run")
    p.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2",
                   help="a flag of the app and its values (repeat for more flags)")
    p.add_argument("--shard", default="0/1", metavar="I/N", help="run only runs I, I+N, ... (0 <= I < N)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once on this machine")
    p.add_argument("--summary", action="store_true",
                   help="print the table of --out and exit (its grid as the sweep recorded it)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- APP [FLAGS...]")
    a = p.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not a.out:
        sys.exit("sweep: --out names no folder")
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        sys.exit(f"sweep: --out {a.out} is not a folder")
    grid = parse_grid(a.grid)
    m = re.fullmatch(r"(\d+)/(\d+)", a.shard)
    if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
        sys.exit(f"sweep: --shard must be I/N with 0 <= I < N, got '{a.shard}'")
    shard, shards = int(m.group(1)), int(m.group(2))
    if a.jobs < 1:
        sys.exit("sweep: --jobs must be at least 1")
    if a.summary:
        if not os.path.isdir(a.out):
            sys.exit(f"sweep: --out {a.out}: no such folder")
        if not a.grid:
            grid = load_grid(a.out)
            if grid is None:
                sys.exit(f"sweep: {a.out} holds no {GRID_FILE} (a sweep from before it was kept): "
                         "give its --grid flags")
        summary(a.out, grid)
        return 0
    if not cmd:
        sys.exit("sweep: no app to run: give it after --, e.g. -- build/bin/mlp_train --data synthetic")
    if shutil.which(cmd[0]) is None:  # with a '/', which() checks just that path
        where = "is not an executable file" if os.sep in cmd[0] else "is not an executable on PATH"
        sys.exit(f"sweep: cannot run the app: '{cmd[0]}' {where}")
    for n, _ in grid:
        if has_flag(cmd, n):
            sys.exit(f"sweep: --{n} is both a grid flag and in the app's flags")
    for n in ("metrics", "checkpoint-dir", "resume"):  # (the app takes the last one given)
        if has_flag(cmd[1:], n):
            sys.exit(f"sweep: --{n} is the sweep's own (each run's --metrics RUN/metrics.jsonl, "
                     f"--checkpoint-dir RUN/ckpt --resume): leave it out of the app's flags")
    combos = combinations(grid)
    names = [run_name(c) for c in combos]
    if len(set(names)) != len(names):
        sys.exit("sweep: two runs would share a folder name (values that differ only in "
                 "characters other than letters, digits, '.', '+', '-'); rename the values")

    try:  # (the latest grid: a sweep run again with more values is summarised with them)
        os.makedirs(a.out, exist_ok=True)
        tmp = os.path.join(a.out, f"{GRID_FILE}.tmp-{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(grid, f)
        os.replace(tmp, os.path.join(a.out, GRID_FILE))
    except OSError as e:
        sys.exit(f"sweep: cannot write into --out {a.out}: {e.strerror}")

    mine = [c for i, c in enumerate(combos) if i % shards == shard]
    todo = [c for c in mine if not os.path.exists(os.path.join(a.out, run_name(c), "done"))]
    print(f"sweep: {len(combos)} runs in all, {len(mine)} in shard {shard}/{shards}, "
          f"{len(mine) - len(todo)} already done, {len(todo)} to run, {a.jobs} at once", flush=True)
    env = dict(os.environ)
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // a.jobs))

    running = {}  # Popen -> (combo, log file)
    stopping = []
    # Process groups of runs stopped by a signal whose own process (a wrapper script, say)
    # ended before what it started (the app, still writing its checkpoint): waited for, and
    # sent later signals, so that the sweep ends after its runs.
    lingering = set()

    def stop(sig, _frame):
        if sig == signal.SIGHUP:
            # The terminal is gone: a print to it would fail (EIO) and end the sweep before
            # its runs have checkpointed.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.dup2(devnull, sys.stderr.fileno())
        stopping.append(sig)
        for group in [proc.pid for proc in running] + list(lingering):
            signal_group(group, sig)
    for sig in STOP_SIGNALS:  # SIGHUP too: a closed terminal or ssh session stops the runs
        # ...unless the sweep started with it ignored (nohup; SIGINT in a background job)
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, stop)

    failed = 0
    queue = list(todo)
    while queue or running or lingering:
        while queue and len(running) < a.jobs and not stopping:
            combo = queue.pop(0)
            d = os.path.join(a.out, run_name(combo))
            os.makedirs(d, exist_ok=True)
            for marker in ("failed",):
                if os.path.exists(os.path.join(d, marker)):
                    os.remove(os.path.join(d, marker))
            # --NAME=VALUE, one word: a Bool flag takes no separate value (its "false" would be
            # an unexpected argument), and a value may start with '-'.
            argv = per_run_tensorboard(cmd, run_name(combo)) + [f"--{n}={v}" for n, v in combo] + \
                ["--metrics", os.path.join(d, "metrics.jsonl"), "--checkpoint-dir", os.path.join(d, "ckpt"), "--resume"]
            with open(os.path.join(d, "command"), "w") as f:
                f.write(shlex.join(argv) + "\n")  # quoted: a shell can run it as it is
            log = open(os.path.join(d, "log"), "a")
            print(f"sweep: start {run_name(combo)}", flush=True)
            # A session of its own: a Ctrl-C at the terminal reaches only the sweep, which passes
            # it on once. Stop signals wait while the run starts, so none falls between its
            # start and its entry in `running`.
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                if stopping:  # (one came after the loop's check: this run is not started)
                    log.close()
                    break
                proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True, preexec_fn=child_setup)
                running[proc] = (combo, log)
            except OSError as e:  # e.g. not a program this machine runs (exec format error)
                failed += 1
                log.write(f"sweep: cannot run '{argv[0]}': {e.strerror or e}\n")
                log.close()
                open(os.path.join(d, "failed"), "w").close()
                print(f"sweep: FAILED {run_name(combo)} (cannot run '{argv[0]}': {e.strerror or e})", flush=True)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        if not running and not lingering:
            break
        time.sleep(0.1)
        lingering = {g for g in lingering if group_alive(g)}
        for proc in [p for p in running if p.poll() is not None]:
            combo, log = running.pop(proc)
            log.close()
            d = os.path.join(a.out, run_name(combo))
            if proc.returncode == 0:
                open(os.path.join(d, "done"), "w").close()
                print(f"sweep: done {run_name(combo)}", flush=True)
            elif stopping:
                if group_alive(proc.pid):
                    lingering.add(proc.pid)
                print(f"sweep: stopped {run_name(combo)} (exit {proc.returncode}); run the sweep again to resume it",
                      flush=True)
            else:
                failed += 1
                open(os.path.join(d, "failed"), "w").close()
                print(f"sweep: FAILED {run_name(combo)} (exit {proc.returncode}); its log: {os.path.join(d, 'log')}",
                      flush=True)
    print()
    summary(a.out, grid)
    if stopping:
        return 128 + stopping[0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
