#!/usr/bin/env python3
"""Runs bench/report.py on the synthetic results in tests/report/results/ and checks
report.md's table rows, the cost and speedup arithmetic, the SVGs (well-formed XML with
titled, labelled axes and a legend), and the one-line errors for bad input.

  tests/report/test_report.py bench/report.py
"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS, PRICES = os.path.join(HERE, "results"), os.path.join(HERE, "prices.csv")
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
    return ok


def run(report, *args):
    p = subprocess.run([sys.executable, report, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def tables(md):
    """report.md -> {benchmark: [row dicts keyed by the header]}."""
    out, bench, head = {}, None, None
    for line in md.splitlines():
        if line.startswith("## "):
            bench, head = line[3:].strip(), None
        elif line.startswith("|") and bench:
            cells = [c.strip() for c in line.strip("|").split("|")]
            if head is None:
                head = cells
            elif not set(line) <= set("|-: "):
                out.setdefault(bench, []).append(dict(zip(head, cells)))
    return out


def find(rows, **key):
    hits = [r for r in rows if all(r[k] == v for k, v in key.items())]
    check(len(hits) == 1, f"expected one row {key}, found {len(hits)}")
    return hits[0] if hits else None


def close(cell, expected, rel=2e-3):
    try:
        return abs(float(cell.replace(",", "")) - expected) <= rel * abs(expected)
    except ValueError:
        return False


def svg_texts(path):
    root = ET.parse(path).getroot()  # raises on malformed XML
    return {"".join(e.itertext()).strip() for e in root.iter() if e.tag.endswith("text")}


def main():
    report = sys.argv[1]
    prices = {}
    for line in open(PRICES):
        if line.strip() and not line.startswith("#") and not line.startswith("machine,"):
            m, p = line.strip().split(",")
            prices[m] = float(p)
    with tempfile.TemporaryDirectory() as out:
        code, stdout, stderr = run(report, RESULTS, "--prices", PRICES, "--out", out)
        if not check(code == 0, f"report exited {code}: {stderr}"):
            return finish()
        t = tables(open(os.path.join(out, "report.md")).read())
        check(set(t) == {"mnist", "imdb"}, f"tables for mnist and imdb, got {sorted(t)}")
        n_records = sum(len(json.load(open(os.path.join(RESULTS, f)))["records"])
                        for f in os.listdir(RESULTS))
        check(sum(map(len, t.values())) == n_records, "one table row per record")

        # Every priced row: cost = seconds x price / 3600; unpriced: n/a.
        for bench, rows in t.items():
            for r in rows:
                price = prices.get(r["machine"])
                cost = r["cost per run (USD)"]
                if price is None:
                    check(cost == "n/a" and r["price (USD/h)"] == "n/a", f"{bench} {r}: cost n/a")
                else:
                    check(close(cost, float(r["runtime (s)"]) * price / 3600), f"{bench} {r}: cost")

        mnist, imdb = t.get("mnist", []), t.get("imdb", [])
        key = dict(model="cnn", impl="libnn", precision="fp32", phase="train")
        gpu = find(mnist, machine="example-gpu", **key)
        if gpu:  # 20 s at 3.60/h; 9000 vs 300 samples/s on the CPU
            check(close(gpu["cost per run (USD)"], 0.02), f"gpu cost 0.02, got {gpu}")
            check(gpu["speedup vs CPU"] == "30.00x", f"gpu speedup 30.00x, got {gpu}")
            check(gpu["accuracy"] == "98.10%", f"accuracy 98.10%, got {gpu}")
        cpu = find(mnist, machine="example-cpu", **key)
        if cpu:
            check(close(cpu["cost per run (USD)"], 0.06) and cpu["speedup vs CPU"] == "1.00x", f"cpu {cpu}")
        slow = find(mnist, machine="example-unpriced", **key)
        if slow:
            check(slow["cost per run (USD)"] == "n/a" and slow["speedup vs CPU"] == "0.67x", f"{slow}")
        infer = find(mnist, machine="example-gpu", model="cnn", impl="libnn", phase="infer")
        if infer:
            check(infer["speedup vs CPU"] == "20.00x", f"inference speedup 20.00x, got {infer}")
        fp16 = find(imdb, machine="example-gpu", model="bert", precision="fp16")
        if fp16:  # no CPU fp16 run to compare with
            check(fp16["speedup vs CPU"] == "n/a", f"fp16 speedup n/a, got {fp16}")
        mlp = [find(imdb, machine=m, model="mlp") for m in ("example-cpu", "example-gpu")]
        if all(mlp):  # the light MLP: the CPU machine is slower but the cheaper buy
            check(float(mlp[0]["cost per run (USD)"]) < float(mlp[1]["cost per run (USD)"]), f"{mlp}")

        labels = {"runtime": ["runtime (s", "model configuration"],
                  "cost": ["cost per run (USD", "model configuration"],
                  "runtime_vs_cost": ["runtime (s", "cost per run (USD"]}
        for bench in ("mnist", "imdb"):
            for kind, axes in labels.items():
                path = os.path.join(out, f"{bench}_{kind}.svg")
                if not check(os.path.exists(path), f"missing {path}"):
                    continue
                try:
                    texts = svg_texts(path)
                except ET.ParseError as e:
                    check(False, f"{path}: not well-formed XML: {e}")
                    continue
                for label in axes + [f"{bench}:", "machine (device)", "example-gpu (cuda)"]:
                    check(any(label in s for s in texts), f"{bench}_{kind}.svg lacks text '{label}'")

        # No price table: the report still comes out, every cost n/a, no cost plots.
        out2 = os.path.join(out, "noprices")
        code, _, stderr = run(report, RESULTS, "--out", out2)
        check(code == 0, f"without --prices: exit {code}: {stderr}")
        if code == 0:
            rows = [r for rs in tables(open(os.path.join(out2, "report.md")).read()).values() for r in rs]
            check(rows and all(r["cost per run (USD)"] == "n/a" for r in rows), "no prices: all n/a")
            check(not os.path.exists(os.path.join(out2, "mnist_cost.svg")), "no prices: no cost plot")

        # Bad input: exit 1 and one line naming the file and what is wrong.
        good = json.load(open(os.path.join(RESULTS, "example-cpu.json")))
        bad_cases = {
            "truncated.json": ('{"schema": "libnn-bench-1", "records": [', "not valid JSON"),
            "old_schema.json": (json.dumps({"runs": []}), "schema"),
            "no_seconds.json": (json.dumps(dict(good, records=[
                {k: v for k, v in good["records"][0].items() if k != "seconds"}])), "'seconds'"),
            "bad_phase.json": (json.dumps(dict(good, records=[dict(good["records"][0], phase="eval")])),
                               "'phase'"),
        }
        for name, (text, words) in bad_cases.items():
            path = os.path.join(out, name)
            open(path, "w").write(text)
            code, _, stderr = run(report, path, "--out", os.path.join(out, "bad"), "--no-plots")
            lines = stderr.strip().splitlines()
            check(code == 1 and len(lines) == 1 and name in lines[0] and words in lines[0],
                  f"{name}: expected exit 1 and one line with '{words}', got {code}: {stderr!r}")
        bad_prices = os.path.join(out, "prices.csv")
        open(bad_prices, "w").write("machine,price_per_hour\nexample-cpu,cheap\n")
        code, _, stderr = run(report, RESULTS, "--prices", bad_prices, "--out", out, "--no-plots")
        check(code == 1 and "prices.csv" in stderr and len(stderr.strip().splitlines()) == 1,
              f"bad price: expected exit 1 and one line, got {code}: {stderr!r}")
        # a --baseline no CPU run has (it read n/a in every row), an --out that is a file
        code, _, stderr = run(report, RESULTS, "--baseline", "cpu-typo", "--out", out, "--no-plots")
        check(code == 1 and "--baseline cpu-typo: no CPU run of that machine" in stderr,
              f"unknown --baseline: expected exit 1 and a line, got {code}: {stderr!r}")
        code, _, stderr = run(report, RESULTS, "--out", bad_prices, "--no-plots")
        check(code == 1 and len(stderr.strip().splitlines()) == 1 and "cannot create the folder" in stderr,
              f"--out a file: expected exit 1 and one line, got {code}: {stderr!r}")
    # runs at two batch sizes (fp16_vs_fp32 at 128 and 256) are two configurations in the plots,
    # not one averaged
    sys.path.insert(0, os.path.dirname(os.path.abspath(report)))
    import report as rep
    rows = [dict(model="resnet50", impl="libnn", precision="fp16", phase="train", batch_size=b)
            for b in (128, 256)]
    labels = sorted(rep.config_label(r, rows) for r in rows)
    check(labels == ["resnet50 batch 128", "resnet50 batch 256"], f"batch sizes share a label: {labels}")
    return finish()


def finish():
    for f in failures:
        print("FAIL", f)
    print("test_report:", "ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
