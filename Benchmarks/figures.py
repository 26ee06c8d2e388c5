"""How make bench reports a figure: its value, its target, PASS or FAIL, and the reference measured
in the same run when there is one. Every line is also appended to the file BENCH_FIGURES names
(make bench lists them together at the end)."""
import os


def report(name, value, target, met, reference=None):
    """Prints `PASS  name: value (reference)   target: target` and appends it to $BENCH_FIGURES."""
    line = f"  {'PASS' if met else 'FAIL'}  {name}: {value}" + (f" ({reference})" if reference else "") + f"   target: {target}"
    print(line, flush=True)
    path = os.environ.get("BENCH_FIGURES")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
