"""The jobs `attnkit check` and `attnkit compare` do, from Python: the same
library calls (through the C API), the same records as their --json
reports."""

import json

from . import _capi
from ._config import AttentionConfig
from ._config import as_config


def _backend_list(backends):
    if backends is None:
        return None
    if isinstance(backends, str):
        backends = [backends]
    return ",".join(backends).encode()


def _markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
    return "\n".join(lines) + "\n"


def machine_limits(threads=0, refresh=False):
    """This machine as `attnkit compare` reports it: {"machine": fingerprint
    (CPU, threads, Highway targets, OpenBLAS core, versions), "limits": peak
    FMA GFLOP/s per target, read GB/s, OpenBLAS sgemm GFLOP/s, "how": measured
    now or cached}. refresh=True measures now (a second or two)."""
    text = _capi.call_string(_capi.lib.attnkit_machine_limits, int(threads), 1 if refresh else 0)
    return json.loads(text)


class CheckReport:
    """What attnkit.check() found: one record per backend (dicts with the
    fields of `attnkit check --json`: backend, kernel, status ("pass",
    "fail", "error", "unavailable", "unsupported"), detail, max_abs_err,
    max_rel_err, max_lse_err, max_bound, max_bound_fraction (the largest error
    as a fraction of the oracle's bound; 1 = at the limit), checked,
    mismatches, time_ms). compute: the mode checked, "exact" or "fast"."""

    def __init__(self, report):
        self.report = report  # the JSON report as a dict
        self.id = report["id"]
        self.name = report["name"]
        self.compute = report.get("compute", "exact")
        self.seed = report["seed"]
        self.config = AttentionConfig.from_dict(report["config"])
        self.results = report["results"]

    @property
    def passed(self):
        """True when every backend that ran agrees with the reference."""
        return all(r["status"] not in ("fail", "error") for r in self.results)

    def __getitem__(self, backend):
        for r in self.results:
            if r["backend"] == backend:
                return r
        raise KeyError(backend)

    def to_markdown(self):
        rows = []
        for r in self.results:
            ran = r["status"] in ("pass", "fail")
            rows.append(
                [
                    r["backend"],
                    r["kernel"] or "-",
                    r["status"],
                    f"{r['max_abs_err']:.3e}" if ran else "-",
                    f"{r['max_bound_fraction']:.3f}" if ran else "-",
                    f"{r['time_ms']:.2f}" if ran else "-",
                    r["detail"] if not ran or r["status"] != "pass" else "",
                ]
            )
        title = f"check {self.id}" + (f" ({self.name})" if self.name else "")
        header = ["backend", "kernel", "result", "max abs err", "err/bound", "ms", "detail"]
        return (f"**{title}**, seed {self.seed}, compute {self.compute}\n\n" +
                _markdown_table(header, rows))

    def __repr__(self):
        summary = ", ".join(f"{r['backend']}: {r['status']}" for r in self.results)
        return f"CheckReport({self.id}: {summary})"


def check(config, backends=None):
    """Runs `config` (an AttentionConfig, dict, text-format string or file)
    on every backend (or those named) with random inputs from its seed and
    compares each output with the fp64 reference. Returns a CheckReport; a
    wrong backend is a "fail" record, not an exception (CheckReport.passed).
    ValueError for an invalid config or an unknown backend name."""
    cfg = as_config(config)
    text = _capi.call_string(
        _capi.lib.attnkit_check,
        _capi.context(),
        cfg.to_json().encode(),
        _backend_list(backends),
    )
    return CheckReport(json.loads(text))


class CompareReport:
    """What attnkit.compare() measured: `report` is exactly the JSON of
    `attnkit compare --json` (machine fingerprint, limits measured in the same
    run, flop convention, per problem the results of every backend); records()
    flattens it into one dict per (problem, backend), with the problem's
    compute mode ("exact" or "fast")."""

    def __init__(self, report):
        self.report = report
        self.machine = report["machine"]
        self.limits = report["limits"]
        self.problems = report["problems"]

    def records(self):
        rows = []
        for p in self.problems:
            for r in p["results"]:
                rows.append(dict(r, problem=p["name"] or p["id"], id=p["id"],
                                 memory_bound=p["memory_bound"],
                                 compute=p.get("compute", "exact")))
        return rows

    def to_json(self):
        return json.dumps(self.report, indent=2)

    def to_markdown(self):
        m, lim = self.machine, self.limits
        head = (
            f"**{m['cpu_model']}**, {m['threads']} threads, Highway {m['highway_dispatched']}, "
            f"OpenBLAS {m['openblas_core']}: peak FMA {lim['peak_fma_gflops']:.1f} GFLOP/s, "
            f"read {lim['read_gbps']:.1f} GB/s, sgemm {lim['sgemm_gflops']:.1f} GFLOP/s\n\n"
        )
        rows = []
        for r in self.records():
            ran = r["status"] == "ok"
            rows.append(
                [
                    r["problem"],
                    r["backend"],
                    r["status"],
                    f"{r['median_s'] * 1e3:.3f}" if ran else "-",
                    f"{r['gflops']:.1f}" if ran else "-",
                    f"{r['pct_of_limit']:.1f}%" + (" bw" if r["memory_bound"] else "")
                    if ran
                    else "-",
                    f"{r['speedup_vs_best']:.2f}" if ran else "-",
                    r["kernel"] if ran else r["detail"],
                ]
            )
        header = ["problem", "backend", "status", "median ms", "GFLOP/s", "% of limit",
                  "vs best", "kernel / why"]
        return head + _markdown_table(header, rows)

    def plot(self, path=None):
        """A bar chart of % of the machine limit per problem and backend
        (matplotlib, when installed); saved to `path` when given. Returns the
        figure."""
        try:
            import matplotlib

            if path is not None:
                matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as e:
            raise ImportError("CompareReport.plot needs matplotlib (pip install matplotlib)") from e
        problems = [p["name"] or p["id"] for p in self.problems]
        backends = sorted({r["backend"] for p in self.problems for r in p["results"]})
        fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(problems) * len(backends) / 2), 4))
        width = 0.8 / max(1, len(backends))
        for i, b in enumerate(backends):
            values = []
            for p in self.problems:
                r = next((r for r in p["results"] if r["backend"] == b), None)
                values.append(r["pct_of_limit"] if r is not None and r["status"] == "ok" else 0)
            ax.bar([j + i * width for j in range(len(problems))], values, width, label=b)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(problems))])
        ax.set_xticklabels(problems, rotation=30, ha="right")
        ax.set_ylabel("% of machine limit (FMA peak, or read bandwidth when memory-bound)")
        ax.set_title(f"{self.machine['cpu_model']}, {self.machine['threads']} threads")
        ax.legend()
        fig.tight_layout()
        if path is not None:
            fig.savefig(path)
        return fig

    def __repr__(self):
        return f"CompareReport({len(self.problems)} problems, {self.machine['cpu_model']})"


def compare(config_or_suite="standard", backends=None, threads=0, progress=False):
    """Times every backend (or those named) side by side, each output checked
    against the reference first, figures scaled by this machine's limits
    measured in the same call (as `attnkit compare`). config_or_suite: a
    suite name ("standard"), one config (AttentionConfig, dict, text, file)
    or a list of them. threads 0 = every core; progress prints a line per
    measurement on stderr. Takes seconds per problem and backend."""
    configs_json = suite = None
    if isinstance(config_or_suite, (list, tuple)):
        configs = [as_config(c) for c in config_or_suite]
    elif isinstance(config_or_suite, str) and config_or_suite.isidentifier():
        suite, configs = config_or_suite, None
    else:
        configs = [as_config(config_or_suite)]
    if configs is not None:
        configs_json = json.dumps([c.to_dict() for c in configs]).encode()
    text = _capi.call_string(
        _capi.lib.attnkit_compare,
        _capi.context(),
        configs_json,
        suite.encode() if suite else None,
        _backend_list(backends),
        int(threads),
        1 if progress else 0,
    )
    return CompareReport(json.loads(text))
