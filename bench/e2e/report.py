"""The results table (markdown) and the plot of bound pods over time (PNG).

matplotlib is imported inside `plot` only: the small-N test inside `make test` never needs it.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from .fifo import FifoFigures, busy_curve, compute_fifo, ideal_curve
from .metrics import Figures, PreemptionFigures, Recording, bound_curve
from .workload import Workload

LABELS: Final = {
    "gangsched": "gangsched",
    "native": "kube-scheduler v1.36.3",
    "bare": "bare binder",
    # the jobs workload: gangsched fed the same gangs as PodGroups, and as Jobs
    "podgroups": "gangsched, PodGroups",
    "jobs": "gangsched, Jobs",
    "labelled-jobs": "gangsched, Jobs labelled into PodGroups",
}
COLOURS: Final = {
    "gangsched": "tab:blue",
    "native": "tab:orange",
    "bare": "tab:gray",
    "podgroups": "tab:blue",
    "jobs": "tab:green",
    "labelled-jobs": "tab:olive",
}
CONTESTANT_ORDER: Final = ("gangsched", "native", "bare")
# Requests the bench itself makes (creates and its watch), not the scheduler.
BENCH_REQUESTS: Final = frozenset(
    {"POST pods", "POST podgroups", "LIST pods", "WATCH pods", "POST resourceclaimtemplates", "POST jobs"}
)
# kube-controller-manager's resourceclaim controller during a dra run, the same for both
# contestants: it creates each pod's claim from the template and records its name in the
# pod's status (a server-side apply). Not the scheduler's writes.
CONTROLLER_REQUESTS: Final = frozenset({"POST resourceclaims", "APPLY pods/status"})
# The apiserver's own housekeeping during a run (its lease, the `kubernetes` endpoints).
HOUSEKEEPING: Final = frozenset({"leases", "endpoints", "endpointslices"})
MUTATING: Final = ("POST", "PUT", "PATCH", "DELETE", "APPLY")


def machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} vCPU ({model or platform.processor() or 'unknown CPU'}), {memory:.0f} GiB RAM, "
        f"Linux {platform.release()}, Python {platform.python_version()}"
    )


def scheduler_writes(figures: Figures) -> float:
    """Mutating API requests made by the scheduler (bench creates excluded)."""
    return sum(
        count
        for key, count in figures.api_requests.items()
        if key.split(" ")[0] in MUTATING
        and key not in BENCH_REQUESTS
        and key not in CONTROLLER_REQUESTS
        and key.split(" ")[-1].split("/")[0] not in HOUSEKEEPING
    )


def _median(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return statistics.median(finite) if finite else float("nan")


def _fmt(value: float, unit: str = "", digits: int = 1) -> str:
    if math.isnan(value):
        return "n/a"
    if unit == "%":
        return f"{100 * value:.{digits}f} %"
    return f"{value:,.{digits}f}{(' ' + unit) if unit else ''}"


Row = tuple[str, Callable[[Figures], float], str, int, str]

ROWS: Final[Sequence[Row]] = (
    # label, value, unit, digits, better ("higher" / "lower" / "" for counts that must be 0)
    ("pods bound per second, first create to last bind", lambda f: f.pods_per_second, "", 0, "higher"),
    ("gang latency p50, last pod created to last pod bound", lambda f: f.gang_latency_p50, "s", 2, "lower"),
    ("gang latency p99", lambda f: f.gang_latency_p99, "s", 2, "lower"),
    (
        "Preferred-rack gangs that fit one rack placed in one rack",
        lambda f: f.preferred_in_one_rack,
        "%",
        0,
        "higher",
    ),
    (
        "extra racks per Preferred-rack gang (mean, above the minimum)",
        lambda f: f.mean_extra_racks,
        "",
        2,
        "lower",
    ),
    ("GPU utilisation at saturation (bound / total)", lambda f: f.gpu_utilisation, "%", 1, "higher"),
    ("gangs placed", lambda f: f.gangs_placed, "", 0, "higher"),
    ("partial gangs ever observed (must be 0)", lambda f: f.partial_gangs, "", 0, ""),
    ("Required-domain violations (must be 0)", lambda f: f.required_violations, "", 0, ""),
    ("gangs left pending that fit the free capacity", lambda f: _stranded(f), "", 0, "lower"),
    ("scheduler CPU seconds, first create to last bind", lambda f: f.cpu_seconds, "s", 1, "lower"),
    ("scheduler CPU ms per bound pod", lambda f: 1000 * f.cpu_seconds / max(f.pods_bound, 1), "", 2, "lower"),
    (
        "scheduler CPU after the last bind, gangs still pending (cores)",
        lambda f: f.after_last_bind_cores,
        "",
        2,
        "lower",
    ),
    ("scheduler peak RSS", lambda f: f.peak_rss_mib, "MiB", 0, "lower"),
    (
        "scheduler API writes per bound pod",
        lambda f: scheduler_writes(f) / max(f.pods_bound, 1),
        "",
        2,
        "lower",
    ),
    (
        "kube-apiserver CPU seconds, first create to last bind",
        lambda f: f.apiserver_cpu_seconds,
        "s",
        1,
        "lower",
    ),
    ("pods created per second by the load generator", lambda f: f.submit_pods_per_second, "", 0, ""),
    # dra workload only (the table leaves these rows out when no run has them)
    ("devices allocated twice (must be 0)", lambda f: _optional(f.devices_allocated_twice), "", 0, ""),
    ("bound pods without their device (must be 0)", lambda f: _optional(f.bound_without_device), "", 0, ""),
    ("ResourceClaims allocated at the end", lambda f: _optional(f.claims_allocated), "", 0, ""),
)
DRA_ROWS: Final = frozenset(row[0] for row in ROWS[-3:])
THROUGHPUT_ROW: Final = ROWS[0][0]
# The bare binder schedules nothing (round-robin, over-committing nodes, gangs ignored): rows
# about placement and correctness do not apply to it and read n/a.
BARE_NA: Final = frozenset(
    {
        "Preferred-rack gangs that fit one rack placed in one rack",
        "extra racks per Preferred-rack gang (mean, above the minimum)",
        "GPU utilisation at saturation (bound / total)",
        "gangs placed",
        "partial gangs ever observed (must be 0)",
        "Required-domain violations (must be 0)",
        "gangs left pending that fit the free capacity",
        *DRA_ROWS,
    }
)


def _optional(value: int | None) -> float:
    return float("nan") if value is None else float(value)


def _writes_per_pod(f: Figures) -> float:
    return scheduler_writes(f) / max(f.pods_bound, 1)


def _stranded(f: Figures) -> float:
    return float("nan") if f.stranded_gangs is None else float(f.stranded_gangs)


def table(runs: Mapping[str, Sequence[Figures]]) -> str:
    """Markdown: one column per contestant (median over repeats), ratio gangsched / kube-scheduler;
    with the bare binder, each scheduler's pods bound per second as a share of the bare binder's."""
    names = [n for n in CONTESTANT_ORDER if n in runs]
    head = "| metric | " + " | ".join(LABELS[n] for n in names)
    sep = "|---|" + "---:|" * len(names)
    both = "gangsched" in names and "native" in names
    if both:
        head += " | gangsched / kube-scheduler"
        sep += "---:|"
    of_bare = [n for n in names if n != "bare"] if "bare" in names else []
    for n in of_bare:
        head += f" | {LABELS[n].split()[0]} % of bare"
        sep += "---:|"
    lines = [head + " |", sep]
    for label, value, unit, digits, better in ROWS:
        medians = {
            n: float("nan") if n == "bare" and label in BARE_NA else _median([value(f) for f in runs[n]])
            for n in names
        }
        if label in DRA_ROWS and all(math.isnan(v) for v in medians.values()):
            continue
        cells = [_fmt(medians[n], unit, digits) for n in names]
        if both:
            g, k = medians["gangsched"], medians["native"]
            if better and not (math.isnan(g) or math.isnan(k)) and k != 0:
                cells.append(f"{g / k:.2f}x ({better} is better)")
            else:
                cells.append("")
        for n in of_bare:
            b = medians["bare"]
            share = label == THROUGHPUT_ROW and not (math.isnan(medians[n]) or math.isnan(b)) and b != 0
            cells.append(f"{100 * medians[n] / b:.0f} %" if share else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def workload_line(workload: Workload) -> str:
    s = workload.summary()
    if workload.kind == "preemption":
        return (
            f"{workload.topology.describe()}; preemption, seed {workload.seed}: {s['low_gangs']} "
            f"low-priority gangs ({s['low_pods']} pods, {s['low_half_node_gangs']} of them of 4-GPU "
            f"pods) fill all {s['cluster_gpus']} GPUs, then {s['high_gangs']} high-priority gangs "
            f"({s['high_pods']} pods of 8 GPUs, {s['high_gpus']} GPUs) arrive one at a time; "
            "no topology constraints"
        )
    kind = (
        "; DRA: GPUs are ResourceSlice devices, one claim of one GPU per GPU pod (ResourceClaimTemplate)"
        if workload.dra
        else ""
    )
    if workload.kind == "jobs":
        kind = "; as PodGroups, and as Indexed batch/v1 Jobs (automatic gangs)"
    return (
        f"{workload.topology.describe()}{kind}; seed {workload.seed}: {s['gangs']} gangs, {s['pods']} pods, "
        f"{s['requested_gpus']} GPUs requested for {s['cluster_gpus']} ({workload.oversubscription:.2f}x); "
        f"{s['single_pod_jobs']} single-pod jobs, {s['gangs_le_8_pods']} gangs of <= 8 pods, largest "
        f"{s['largest_gang']} pods, {s['with_launcher']} with a launcher; Required rack "
        f"{s['required_rack']}, Required block + Preferred rack {s['required_block_preferred_rack']}, "
        f"Preferred rack only {s['preferred_rack_only']}, unconstrained {s['unconstrained_groups']}"
    )


def cpu_curve(rec: Recording, *, window: float = 1.0) -> tuple[list[float], list[float]]:
    """Scheduler CPU use in cores, averaged over `window` seconds, against seconds since the first create."""
    t0 = min(rec.created.values(), default=0.0)
    xs: list[float] = []
    ys: list[float] = []
    samples = rec.cpu
    j = 0
    for sample in samples:
        while samples[j].t < sample.t - window:
            j += 1
        if sample.t - samples[j].t > 0:
            xs.append(sample.t - t0)
            ys.append((sample.cpu_seconds - samples[j].cpu_seconds) / (sample.t - samples[j].t))
    return xs, ys


def plot(recordings: Sequence[Recording], workload: Workload, path: Path) -> None:
    """Bound pods over time since the first create, per contestant (created pods dashed), and
    below it the scheduler's CPU use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, cpu) = plt.subplots(
        2, 1, figsize=(9, 6.5), dpi=110, sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    right = 0.0
    for rec in recordings:
        xs, ys, creates = bound_curve(rec, workload)
        right = max(right, xs[-1], creates[-1] if creates else 0.0)
        colour = COLOURS.get(rec.contestant, "tab:gray")
        ax.step(xs, ys, where="post", color=colour, linewidth=2, label=f"{LABELS[rec.contestant]}: bound")
        ax.plot(
            creates,
            range(1, len(creates) + 1),
            color=colour,
            linestyle="--",
            linewidth=1,
            alpha=0.7,
            label=f"{LABELS[rec.contestant]}: created",
        )
        cx, cy = cpu_curve(rec)
        cpu.plot(cx, cy, color=colour, linewidth=1.2, label=LABELS[rec.contestant])
    ax.axhline(workload.pods, color="gray", linewidth=0.8, linestyle=":")
    ax.text(0, workload.pods, f" {workload.pods} pods in the workload", va="bottom", fontsize=8, color="gray")
    ax.set_ylabel("pods")
    ax.set_title(
        f"Pods bound over time: {workload.topology.nodes} nodes x 8 "
        f"{'GPU devices (DRA)' if workload.dra else 'GPUs'}, "
        f"{len(workload.gangs)} gangs, {workload.oversubscription:.2f}x GPU oversubscription"
    )
    ax.grid(True, alpha=0.3)
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right", fontsize=9)
    cpu.set_ylabel("scheduler CPU\n(cores, 1 s avg)")
    cpu.set_xlabel("seconds since the first pod was created")
    cpu.set_ylim(bottom=0)
    cpu.grid(True, alpha=0.3)
    cpu.set_xlim(0, right * 1.05)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


PreemptionRow = tuple[str, Callable[[PreemptionFigures], float], str, int, str]

PREEMPTION_ROWS: Final[Sequence[PreemptionRow]] = (
    (
        "high gang time to run p50, last pod created to all bound",
        lambda f: f.high_latency_p50,
        "s",
        2,
        "lower",
    ),
    ("high gang time to run p99", lambda f: f.high_latency_p99, "s", 2, "lower"),
    ("high gangs placed", lambda f: f.high_placed, "", 0, "higher"),
    ("high gangs submitted", lambda f: f.high_gangs, "", 0, ""),
    ("victims: low pods deleted by the scheduler", lambda f: f.victims, "", 0, "lower"),
    ("preemptions (high gangs with victims)", lambda f: f.preemptions, "", 0, ""),
    ("victims per preemption (mean)", lambda f: f.victims_per_preemption, "", 2, "lower"),
    ("victims per preemption (max)", lambda f: f.victims_per_preemption_max, "", 0, "lower"),
    ("victim GPUs per GPU of the preempting gangs", lambda f: f.evicted_per_needed_gpu, "", 2, "lower"),
    ("victims no Preempted Event explains", lambda f: f.unattributed_victims, "", 0, ""),
    ("low gangs evicted whole", lambda f: f.victim_gangs_whole, "", 0, ""),
    (
        "partial victim gangs, some not all members deleted (must be 0)",
        lambda f: f.partial_victim_gangs,
        "",
        0,
        "",
    ),
    ("partial gangs ever observed (must be 0)", lambda f: f.partial_gangs, "", 0, ""),
    ("low pods bound at saturation", lambda f: f.low_bound_at_saturation, "", 0, ""),
    ("time to saturate, first low pod created to all bound", lambda f: f.saturation_s, "s", 1, ""),
    ("scheduler CPU seconds, first high pod created to the end", lambda f: f.cpu_seconds, "s", 1, "lower"),
)


def preemption_table(runs: Mapping[str, Sequence[PreemptionFigures]]) -> str:
    """Markdown for the preemption workload: one column per contestant (median over repeats)."""
    names = [n for n in ("gangsched", "native") if n in runs]
    lines = ["| metric | " + " | ".join(LABELS[n] for n in names) + " |", "|---|" + "---:|" * len(names)]
    for label, value, unit, digits, _ in PREEMPTION_ROWS:
        cells = [_fmt(_median([float(value(f)) for f in runs[n]]), unit, digits) for n in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# The jobs workload: gangsched fed the same gangs as PodGroups and as Jobs

JOBS_ROWS: Final[Sequence[Row]] = (
    ROWS[0],
    ("gang latency p50, last pod created to last pod bound", lambda f: f.gang_latency_p50, "s", 2, "lower"),
    ("gang latency p90", lambda f: f.gang_latency_p90, "s", 2, "lower"),
    ("gang latency p99", lambda f: f.gang_latency_p99, "s", 2, "lower"),
    (
        "gang latency p50, last pod first seen by the watch to last pod bound",
        lambda f: f.seen_latency_p50,
        "s",
        2,
        "lower",
    ),
    (
        "gang latency p50 from submission (PodGroup or Job created) to last pod bound",
        lambda f: f.submit_latency_p50,
        "s",
        2,
        "lower",
    ),
    ("... p90", lambda f: f.submit_latency_p90, "s", 2, "lower"),
    ("... p99", lambda f: f.submit_latency_p99, "s", 2, "lower"),
    (
        "Jobs: gang formation p50, last pod created to last pod labelled (PodGroup created, pods labelled)",
        lambda f: f.formation_p50,
        "s",
        2,
        "",
    ),
    ("... p90", lambda f: f.formation_p90, "s", 2, ""),
    ("Jobs: last pod labelled to last pod bound, p50", lambda f: f.labelled_to_bound_p50, "s", 2, ""),
    ("... p90", lambda f: f.labelled_to_bound_p90, "s", 2, ""),
    (
        "pods created per second (PodGroups: the benchmark; Jobs: the Job controller)",
        lambda f: f.submit_pods_per_second,
        "",
        0,
        "",
    ),
    ("first pod created to last pod created", lambda f: f.created_span_s, "s", 1, ""),
    ("first pod created to last pod bound", lambda f: f.span_seconds, "s", 1, "lower"),
    ("gangs placed", lambda f: f.gangs_placed, "", 0, "higher"),
    ("GPU utilisation at saturation (bound / total)", lambda f: f.gpu_utilisation, "%", 1, "higher"),
    (
        "Preferred-rack gangs that fit one rack placed in one rack",
        lambda f: f.preferred_in_one_rack,
        "%",
        0,
        "higher",
    ),
    ("partial gangs ever observed (must be 0)", lambda f: f.partial_gangs, "", 0, ""),
    ("Required-domain violations (must be 0)", lambda f: f.required_violations, "", 0, ""),
    ("gangs left pending that fit the free capacity", lambda f: _stranded(f), "", 0, "lower"),
    ("scheduler CPU seconds, first create to last bind", lambda f: f.cpu_seconds, "s", 1, "lower"),
    ("scheduler CPU ms per bound pod", lambda f: 1000 * f.cpu_seconds / max(f.pods_bound, 1), "", 2, "lower"),
    ("scheduler peak RSS", lambda f: f.peak_rss_mib, "MiB", 0, "lower"),
    (
        "kube-apiserver CPU seconds, first create to last bind",
        lambda f: f.apiserver_cpu_seconds,
        "s",
        1,
        "lower",
    ),
    (
        "kube-controller-manager CPU seconds, first create to last bind",
        lambda f: f.controllers_cpu_seconds,
        "s",
        1,
        "lower",
    ),
    ("API writes per bound pod, everyone's", lambda f: all_writes(f) / max(f.pods_bound, 1), "", 2, "lower"),
    (
        "pod PATCHes per bound pod",
        lambda f: f.api_requests.get("PATCH pods", 0.0) / max(f.pods_bound, 1),
        "",
        2,
        "",
    ),
)


def all_writes(figures: Figures) -> float:
    """Mutating API requests during the run, from anyone (the benchmark, the Job controller,
    the scheduler), the apiserver's housekeeping excepted: the Job controller's writes (pods,
    Job statuses, its Events) cannot be told from the scheduler's by the apiserver's counters."""
    return sum(
        count
        for key, count in figures.api_requests.items()
        if key.split(" ")[0] in MUTATING and key.split(" ")[-1].split("/")[0] not in HOUSEKEEPING
    )


def _spread(values: Sequence[float], unit: str, digits: int) -> str:
    """The median, and with several runs the range: `1.23 s (1.10-1.40)`."""
    finite = sorted(v for v in values if not math.isnan(v))
    median = _fmt(_median(finite), unit, digits)
    if len(finite) < 2 or finite[0] == finite[-1]:
        return median
    low, high = (
        _fmt(v, "", digits) if unit != "%" else f"{100 * v:.{digits}f}" for v in (finite[0], finite[-1])
    )
    return f"{median} ({low}-{high})"


def jobs_table(runs: Mapping[str, Sequence[Figures]]) -> str:
    """Markdown for the jobs workload: gangsched fed PodGroups, Jobs, Jobs labelled into
    PodGroups (median over repeats, with the range), and each Jobs feed / PodGroups."""
    names = [n for n in ("podgroups", "jobs", "labelled-jobs") if n in runs]
    head = "| metric | " + " | ".join(LABELS[n] for n in names)
    sep = "|---|" + "---:|" * len(names)
    others = [n for n in names if n != "podgroups"] if "podgroups" in names else []
    for n in others:
        head += " | Jobs / PodGroups" if n == "jobs" else " | labelled Jobs / PodGroups"
        sep += "---:|"
    lines = [head + " |", sep]
    for label, value, unit, digits, better in JOBS_ROWS:
        cells = [_spread([value(f) for f in runs[n]], unit, digits) for n in names]
        p = _median([value(f) for f in runs["podgroups"]]) if others else float("nan")
        for n in others:
            j = _median([value(f) for f in runs[n]])
            ratio = better and not (math.isnan(p) or math.isnan(j)) and p != 0
            cells.append(f"{j / p:.2f}x ({better} is better)" if ratio else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# The fifo-rounds workload (issue 26)

FIFO_LABELS: Final = {
    "native": "kube-scheduler v1.36.3",
    "gangsched": "gangsched BestEffortFIFO",
    "gangsched-strict": "gangsched StrictFIFO",
    "gangsched-reserve0": "gangsched BestEffortFIFO, --reservation-after 0",
}
FIFO_COLOURS: Final = {
    "native": "tab:orange",
    "gangsched": "tab:blue",
    "gangsched-strict": "tab:green",
    "gangsched-reserve0": "tab:purple",
}


def fifo_workload_line(workload: Workload, run_seconds: float, rounds: int) -> str:
    sizes = [len(g.pods) for g in workload.gangs]
    return (
        f"Workload fifo-rounds (seed {workload.seed}): {len(sizes)} whole-node gangs of "
        f"{min(sizes)} to {max(sizes)} pods ({sum(sizes)} pods, 8 GPUs each), submitted gang after "
        f"gang, each pod running {run_seconds:g} s; {workload.topology.describe()}. Strict FIFO "
        f"packs them in {rounds} rounds: ideal makespan {rounds * run_seconds:g} s."
    )


def fifo_table(runs: Mapping[str, Sequence[FifoFigures]]) -> str:
    """One row per run: makespan, occupancy (ideal / makespan), inversions, gaps."""
    head = (
        "| contestant | makespan | occupancy (ideal / makespan) | GPU busy | inversions | "
        "largest gap between rounds | sum of gaps | first gang started | gangs started | pods finished |"
    )
    lines = [head, "|" + "---|" * 10]
    for name, figures in runs.items():
        for f in figures:
            lines.append(
                f"| {FIFO_LABELS.get(name, name)} | {f.makespan_s:.1f} s | {f.occupancy:.3f} | "
                f"{100 * f.gpu_busy:.1f} % | {f.inversions} | {f.largest_gap_s:.2f} s "
                f"(at {f.largest_gap_at_s:.0f} s) | {f.total_gap_s:.2f} s | {f.first_start_s:.2f} s | "
                f"{f.gangs_started} / {f.gangs} | {f.pods_finished} / {f.pods} |"
            )
    return "\n".join(lines)


def fifo_plot(recordings: Sequence[Recording], workload: Workload, run_seconds: float, path: Path) -> None:
    """Busy GPUs over time, one panel per contestant, over the ideal strict-FIFO schedule."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [len(g.pods) for g in workload.gangs]
    ideal_x, ideal_y = ideal_curve(sizes, workload.topology.nodes, run_seconds)
    fig, axes = plt.subplots(
        len(recordings), 1, figsize=(9, 1.2 + 2.0 * len(recordings)), dpi=110, sharex=True, squeeze=False
    )
    right = ideal_x[-1]
    for ax, rec in zip(axes[:, 0], recordings, strict=True):
        xs, ys = busy_curve(rec, workload)
        right = max(right, xs[-1])
        figures = compute_fifo(rec, workload, run_seconds=run_seconds)
        label = FIFO_LABELS.get(rec.contestant, rec.contestant)
        ax.step(
            ideal_x,
            ideal_y,
            where="post",
            color="gray",
            linestyle=":",
            linewidth=1,
            label="ideal strict FIFO",
        )
        ax.step(
            xs,
            ys,
            where="post",
            color=FIFO_COLOURS.get(rec.contestant, "tab:gray"),
            linewidth=1.6,
            label=f"{label}: {figures.makespan_s:.0f} s, {figures.occupancy:.2f} of ideal, "
            f"{figures.inversions} inversions",
        )
        ax.axhline(workload.topology.gpus, color="black", linewidth=0.6)
        ax.set_ylim(0, workload.topology.gpus * 1.25)
        ax.set_ylabel("busy GPUs")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=8, ncol=2)
    axes[0, 0].set_title(
        f"GPU occupancy: {len(sizes)} whole-node gangs in FIFO order on "
        f"{workload.topology.nodes} nodes x 8 GPUs, {run_seconds:g} s each"
    )
    axes[-1, 0].set_xlabel("seconds since the first pod was created")
    axes[-1, 0].set_xlim(0, right * 1.03)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
