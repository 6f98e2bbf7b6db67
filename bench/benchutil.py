"""Helpers the bench drivers share."""
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys


def cpu_name():
    """The CPU's model name from /proc/cpuinfo (the host field of result files)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def add_torch_python(ap):
    """The --python flag of the drivers that run a PyTorch peer."""
    ap.add_argument("--python", default=os.environ.get("TORCH_PYTHON", sys.executable),
                    help="interpreter with torch installed (default: $TORCH_PYTHON or this one)")


def check_paths(out=None, programs=()):
    """Exits with one line, before anything runs, when the result file --out cannot be written
    (no such folder, a folder, no permission) or a program to run is missing: `programs` holds
    (flag, path) pairs (--python, --bench, --app); a bare name is looked up on PATH."""
    name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    for flag, path in programs:
        if not shutil.which(path):
            sys.exit(f"{name}: {flag} {path}: no such program (or it is not executable)")
    if out:
        folder = os.path.dirname(os.path.abspath(out))
        if os.path.isdir(out):
            sys.exit(f"{name}: --out {out}: it is a folder")
        if not os.path.isdir(folder):
            sys.exit(f"{name}: --out {out}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK) or (os.path.exists(out) and not os.access(out, os.W_OK)):
            sys.exit(f"{name}: --out {out}: not writable")


def peer_context(python, device, threads, machine=None):
    """What a libnn-against-PyTorch driver prints and files about its run: (PyTorch's version,
    the host (the GPU's name, or the CPU's and the thread count), today's date, the machine
    kind for bench/report's price table: `machine` when given)."""
    torch_version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()
    gpu = ""
    if device.startswith("cuda"):
        gpu = subprocess.run([python, "-c", "import torch; print(torch.cuda.get_device_name())"],
                             capture_output=True, text=True).stdout.strip()
    host = gpu or f"{cpu_name()}, {threads} threads"
    machine = machine or (("gpu-" + gpu.lower().replace(" ", "-")) if gpu else f"cpu-{threads}core")
    return torch_version, host, datetime.date.today().isoformat(), machine


def run_json_lines(cmd, env=None):
    """Runs cmd with its stderr passed straight through and its other stdout lines echoed as
    they come (a run cut by a time limit leaves its progress in the log, where all of it was
    held until the end); returns the JSON objects it printed on stdout, one a line. Exits
    naming the command when it fails."""
    records = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) as p:
        for line in p.stdout:
            if line.startswith("{"):
                records.append(json.loads(line))
            else:
                sys.stdout.write(line)
                sys.stdout.flush()
    if p.returncode != 0:
        name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
        sys.exit(f"{name}: {' '.join(cmd)} failed ({p.returncode}; its messages are above)")
    return records


def import_pyplot():
    """matplotlib.pyplot on the Agg backend, with SVGs that keep text as text and come out the
    same for the same input. Debian's python3-matplotlib lives in /usr/bin/python3; when this
    interpreter (pyenv, a venv) lacks matplotlib, the running script is re-run once under
    /usr/bin/python3. Raises ImportError when no matplotlib can be found."""
    try:
        import matplotlib
    except ImportError:
        system = "/usr/bin/python3"
        if (os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system)
                and not os.environ.get("LIBNN_PLOT_REEXEC")):
            os.environ["LIBNN_PLOT_REEXEC"] = "1"
            os.execv(system, [system, os.path.abspath(sys.argv[0])] + sys.argv[1:])
        raise ImportError("the plots need matplotlib (Debian: apt-get install python3-matplotlib)")
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: searchable, smaller
    matplotlib.rcParams["svg.hashsalt"] = "libnn"  # same input, same SVG
    import matplotlib.pyplot as plt
    return plt
