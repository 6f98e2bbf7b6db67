#!/usr/bin/env python3
"""Runtime and cost report from benchmark results: reads result files (schema libnn-bench-1,
see bench/README.md) and a price table, writes OUT/report.md (one table per benchmark) and
SVG plots per benchmark: runtime, cost per run, runtime vs cost.

  bench/report.py results/ --prices bench/prices.example.csv --out report/
  bench/report.py a.json b.json --out report/ --no-plots

Cost of a run = runtime x price per hour / 3600. Speedup = samples/s over the CPU run of the
same benchmark, model, impl, precision and phase."""
import argparse
import csv
import io
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchutil  # noqa: E402

SCHEMA = "libnn-bench-1"
KEY_FIELDS = ("benchmark", "model", "impl", "device", "precision", "phase")
# Optional record fields that make another configuration of the same model: runs that differ
# in one are neither averaged together nor compared as CPU and GPU of one thing
CONFIG_FIELDS = ("layout", "batch_size", "seq_len", "variant")
PHASES = ("train", "infer")


class ReportError(Exception):
    pass


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_record(path, i, r):
    where = f"{path}: records[{i}]"
    if not isinstance(r, dict):
        raise ReportError(f"{where} is not an object")
    for k in KEY_FIELDS:
        if not isinstance(r.get(k), str) or not r[k]:
            raise ReportError(f"{where}: '{k}' must be a non-empty string, got {r.get(k)!r}")
    if r["phase"] not in PHASES:
        raise ReportError(f"{where}: 'phase' must be train or infer, got {r['phase']!r}")
    for k in ("seconds", "samples_per_second"):
        if not is_number(r.get(k)) or r[k] <= 0:
            raise ReportError(f"{where}: '{k}' must be a number > 0, got {r.get(k)!r}")
    if not is_number(r.get("samples")) or r["samples"] < 0:
        raise ReportError(f"{where}: 'samples' must be a number >= 0, got {r.get('samples')!r}")
    if "accuracy" in r and not (is_number(r["accuracy"]) and 0 <= r["accuracy"] <= 1):
        raise ReportError(f"{where}: 'accuracy' must be a fraction in [0, 1], got {r['accuracy']!r}")


def load_file(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})")
    except OSError as e:
        raise ReportError(f"{path}: {e.strerror}")
    if not isinstance(doc, dict) or "schema" not in doc:
        raise ReportError(f"{path}: no \"schema\": \"{SCHEMA}\" field: not a benchmark result file "
                          "(bench/README.md describes the format)")
    if doc["schema"] != SCHEMA:
        raise ReportError(f"{path}: schema {doc['schema']!r} is not {SCHEMA!r}")
    if not isinstance(doc.get("machine"), str) or not doc["machine"]:
        raise ReportError(f"{path}: 'machine' must be a non-empty string (the price table's key)")
    records = doc.get("records")
    if not isinstance(records, list) or not records:
        raise ReportError(f"{path}: 'records' must be a non-empty list")
    rows = []
    for i, r in enumerate(records):
        check_record(path, i, r)
        rows.append(dict(r, machine=doc["machine"]))
    return doc, rows


def load_results(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs if f.endswith(".json"))
            if not found:
                raise ReportError(f"{p}: no .json result files in this folder")
            files += found
        else:
            files.append(p)
    sources, rows = [], []
    for f in files:
        doc, r = load_file(f)
        sources.append((f, doc))
        rows += r
    return sources, rows


def load_prices(path):
    """CSV `machine,price_per_hour` with a header; lines starting with # are comments."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [l for l in f if not l.lstrip().startswith("#")]
    except OSError as e:
        raise ReportError(f"{path}: {e.strerror}")
    reader = csv.DictReader(io.StringIO("".join(lines)))
    if not reader.fieldnames or not {"machine", "price_per_hour"} <= set(reader.fieldnames):
        raise ReportError(f"{path}: the header must be machine,price_per_hour, got {reader.fieldnames}")
    prices = {}
    for n, row in enumerate(reader, 1):
        machine, price = (row.get("machine") or "").strip(), (row.get("price_per_hour") or "").strip()
        try:
            value = float(price)
        except ValueError:
            value = -1
        if not machine or not value >= 0 or not math.isfinite(value):
            raise ReportError(f"{path}: data row {n}: expected machine,price_per_hour, got {row}")
        if machine in prices:
            raise ReportError(f"{path}: machine '{machine}' is priced twice")
        prices[machine] = value
    return prices


def annotate(rows, prices, baseline):
    """Adds price, cost and speedup to each row."""
    def key(r):
        return tuple(r[k] for k in KEY_FIELDS if k != "device") + tuple(r.get(k, "") for k in CONFIG_FIELDS)
    groups = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    for r in rows:
        r["price"] = prices.get(r["machine"])
        r["cost"] = r["seconds"] * r["price"] / 3600 if r["price"] is not None else None
        group = groups[key(r)]
        cpu = [g for g in group if g["device"] == "cpu" and baseline in (None, g["machine"])]
        r["speedup"] = r["samples_per_second"] / cpu[0]["samples_per_second"] if cpu else None
        r["baseline"] = cpu[0]["machine"] if cpu else None


def fmt_rate(v):
    """Samples/s with at least two significant digits (BERT on a CPU runs at 1.6/s)."""
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def fmt_cost(c):
    if c is None:
        return "n/a"
    if c == 0 or c >= 1000:
        return f"{c:,.0f}"
    return f"{c:.4g}" if c >= 0.001 else f"{c:.2e}"


def table(rows, currency):
    accuracy = any("accuracy" in r for r in rows)
    head = ["model", "impl", "machine", "device", "precision", "phase", "runtime (s)", "samples/s"]
    head += ["accuracy"] * accuracy + [f"price ({currency}/h)", f"cost per run ({currency})",
                                       "speedup vs CPU"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * 6 + "---:|" * (len(head) - 6)]
    for r in rows:
        # (the model with what sets its configuration apart: batch size, length, layout)
        cells = [" ".join([r["model"]] + config_parts(r, rows, CONFIG_FIELDS)), r["impl"],
                 r["machine"], r["device"], r["precision"], r["phase"],
                 f"{r['seconds']:.1f}", fmt_rate(r['samples_per_second'])]
        if accuracy:
            cells.append(f"{100 * r['accuracy']:.2f}%" if "accuracy" in r else "")
        cells += ["n/a" if r["price"] is None else f"{r['price']:.2f}", fmt_cost(r["cost"]),
                  "n/a" if r["speedup"] is None else f"{r['speedup']:.2f}x"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def config_label(r, rows):
    """Names a row's configuration by the fields that vary within its benchmark (runs of one
    configuration are averaged in the plots, so batch sizes must stay apart)."""
    varying = ("impl", "precision", "phase") + CONFIG_FIELDS  # layout: nchw/nhwc
    return " ".join([r["model"]] + config_parts(r, rows, varying))


def config_parts(r, rows, fields):
    """The row's values of those `fields` that vary within its benchmark, as words."""
    show = {"batch_size": lambda v: f"batch {v}", "seq_len": lambda v: f"length {v}"}
    return [show.get(k, str)(r[k]) for k in fields
            if len({x.get(k, "") for x in rows}) > 1 and r.get(k, "") != ""]


def series_label(r):
    return f"{r['machine']} ({r['device']})"


def short(y):
    return f"{y:,.0f}" if y >= 100 else f"{y:.3g}"


def plots(bench, rows, out_dir, currency, plt, colors):
    """Writes the SVGs of one benchmark; returns [(title, file name)]. `colors` maps each
    machine (device) to one colour for every benchmark."""
    configs = list(dict.fromkeys(config_label(r, rows) for r in rows))
    series = [s for s in colors if any(series_label(r) == s for r in rows)]
    legend = dict(title="machine (device)", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))

    def mean_by(key):  # (config, series) -> mean of key over repeated runs
        acc = {}
        for r in rows:
            if r[key] is not None:
                acc.setdefault((config_label(r, rows), series_label(r)), []).append(r[key])
        return {k: sum(v) / len(v) for k, v in acc.items()}

    def scale(ax, values, axis):
        """Log scale when values span more than 30x (CPU vs GPU runs usually do)."""
        if values and min(values) > 0 and max(values) / min(values) > 30:
            (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
            return ", log scale"
        (ax.set_ylim if axis == "y" else ax.set_xlim)(0, None)  # no negative runtimes or costs
        return ""

    def bars(values, quantity, unit, title):
        fig, ax = plt.subplots(figsize=(max(6.4, 1.5 + 0.45 * len(configs) * len(series)), 4.8))
        width = 0.8 / len(series)
        present = {c: [s for s in series if (c, s) in values] for c in configs}
        for s in series:
            cs = [c for c in configs if s in present[c]]
            if cs:  # each group's bars centred on its tick, however many machines it has
                xs = [configs.index(c) + (present[c].index(s) - (len(present[c]) - 1) / 2) * width
                      for c in cs]
                b = ax.bar(xs, [values[(c, s)] for c in cs], width, label=s, color=colors[s])
                ax.bar_label(b, labels=[short(values[(c, s)]) for c in cs], fontsize=7, padding=1)
        ax.margins(y=0.12)
        how = scale(ax, list(values.values()), "y")
        tilt = len(configs) > 3
        ax.set_xticks(range(len(configs)), configs, rotation=20 if tilt else 0,
                      ha="right" if tilt else "center")
        ax.set_xlabel("model configuration")
        ax.set_ylabel(f"{quantity} ({unit}{how})")
        ax.set_title(title)
        ax.legend(**legend)
        return fig

    def scatter(runtime, cost, title):
        fig, ax = plt.subplots(figsize=(7.5, 5.5))
        points = [(runtime[k], cost[k], k[0], s) for s in series for k in cost if k[1] == s]
        for s in series:
            pts = [p for p in points if p[3] == s]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=colors[s], label=s, zorder=3)
        ax.margins(0.15)
        xs, ys = scale(ax, [p[0] for p in points], "x"), scale(ax, [p[1] for p in points], "y")
        fig.canvas.draw()  # fixes the axis limits, so label positions can be computed
        k = fig.dpi / 72  # pixels per point
        dots = [ax.transData.transform((p[0], p[1])) for p in points]
        boxes = [(x - 4 * k, y - 4 * k, x + 4 * k, y + 4 * k) for x, y in dots]  # the markers
        for (x, y), (data_x, data_y, text, _) in zip(dots, points):
            # Points close together: try right, left, then further up or down, until the
            # label stays inside the axes and overlaps no marker and no label placed before
            # (7 pt text: ~4.2 pt a character).
            w, h = len(text) * 4.2 * k, 9 * k
            for dy in (3, -11, 12, -20, 21, -29):
                for dx in (5, -5):
                    x0 = x + dx * k if dx > 0 else x + dx * k - w
                    box = (x0, y + dy * k, x0 + w, y + dy * k + h)
                    inside = (ax.bbox.x0 < box[0] and box[2] < ax.bbox.x1
                              and ax.bbox.y0 < box[1] and box[3] < ax.bbox.y1)
                    if inside and not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3]
                                          and b[1] < box[3] for b in boxes):
                        break
                else:
                    continue
                break
            boxes.append(box)
            ax.annotate(text, (data_x, data_y), textcoords="offset points", xytext=(dx, dy), fontsize=7,
                        ha="left" if dx > 0 else "right", va="bottom")
        ax.set_xlabel(f"runtime (s{xs})")
        ax.set_ylabel(f"cost per run ({currency}{ys})")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(**legend)
        return fig

    made = []

    def save(fig, name, title):
        fig.savefig(os.path.join(out_dir, name), bbox_inches="tight", metadata={"Date": None})
        plt.close(fig)
        made.append((title, name))

    runtime, cost = mean_by("seconds"), mean_by("cost")
    title = f"{bench}: runtime per model and machine"
    save(bars(runtime, "runtime", "s", title), f"{bench}_runtime.svg", title)
    if cost:
        title = f"{bench}: cost per run, per model and machine"
        save(bars(cost, "cost per run", currency, title), f"{bench}_cost.svg", title)
        title = f"{bench}: runtime vs cost per run (lower left is better)"
        save(scatter(runtime, cost, title), f"{bench}_runtime_vs_cost.svg", title)
    return made


def import_pyplot():
    try:
        return benchutil.import_pyplot()
    except ImportError as e:
        raise ReportError(f"{e}; or pass --no-plots")


def currency_note(a):
    return f"{a.currency} from `{a.prices}`" if a.prices else f"{a.currency} (no price table given)"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="result JSON files, or folders holding them")
    ap.add_argument("--prices", help="CSV machine,price_per_hour (without it every cost is n/a)")
    ap.add_argument("--out", required=True, help="folder for report.md and the SVG plots")
    ap.add_argument("--currency", default="USD", help="the price table's currency (default USD)")
    ap.add_argument("--baseline", help="machine whose CPU runs are the speedup baseline "
                                       "(default: the first CPU run found)")
    ap.add_argument("--no-plots", action="store_true", help="write report.md only")
    a = ap.parse_args()
    try:
        plt = None if a.no_plots else import_pyplot()
        sources, rows = load_results(a.results)
        prices = load_prices(a.prices) if a.prices else {}
        cpu_machines = sorted({r["machine"] for r in rows if r["device"] == "cpu"})
        if a.baseline and a.baseline not in cpu_machines:
            raise ReportError(f"--baseline {a.baseline}: no CPU run of that machine in the results "
                              f"(CPU machines: {', '.join(cpu_machines) or 'none'})")
        annotate(rows, prices, a.baseline)
        try:
            os.makedirs(a.out, exist_ok=True)
        except OSError as e:
            raise ReportError(f"cannot create the folder --out {a.out}: {e.strerror}")
    except ReportError as e:
        print(f"report: {e}", file=sys.stderr)
        return 1
    md = ["# Benchmark report", "", "Sources:", ""]
    for f, doc in sources:
        md.append(f"- `{os.path.basename(f)}`: machine `{doc['machine']}` ({doc.get('host', '?')}), "
                  f"{doc.get('date', 'no date')}, `{doc.get('command', '?')}`")
    unpriced = sorted({r["machine"] for r in rows if r["price"] is None})
    md += ["", f"Cost per run = runtime (s) x price per hour / 3600, prices in {currency_note(a)}."
           " Speedup vs CPU = samples/s divided by the samples/s of the CPU run of the same "
           "benchmark, model, impl, precision and phase (n/a when there is none)."]
    if unpriced:
        md.append(f"No price for: {', '.join(unpriced)} (cost n/a).")
    n_plots = 0
    if plt:  # CPU machines first, then by name; the same colour in every plot
        order = sorted({(r["device"] != "cpu", r["machine"], series_label(r)) for r in rows})
        colors = {s: plt.cm.tab10(i % 10) for i, (_, _, s) in enumerate(order)}
    for bench in dict.fromkeys(r["benchmark"] for r in rows):
        brows = sorted((r for r in rows if r["benchmark"] == bench),
                       key=lambda r: (r["model"], r["impl"], r["precision"], PHASES.index(r["phase"]),
                                      r["device"] != "cpu", r["machine"], r["device"]))
        md += ["", f"## {bench}", "", table(brows, a.currency)]
        bases = sorted({r["baseline"] for r in brows if r["baseline"]})
        if bases:
            md += ["", f"Speedup baseline: the CPU runs on {', '.join(bases)}."]
        if plt:
            made = plots(bench, brows, a.out, a.currency, plt, colors)
            n_plots += len(made)
            for t, name in made:
                md += ["", f"![{t}]({name})"]
            if len(made) == 1:
                md += ["", "No machine of this benchmark has a price: no cost plots."]
    with open(os.path.join(a.out, "report.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")
    print(f"report: {len(rows)} records from {len(sources)} files -> "
          f"{os.path.join(a.out, 'report.md')} and {n_plots} SVG plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
