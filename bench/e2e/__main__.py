"""python -m bench.e2e: gangsched vs kube-scheduler v1.36.3 on one control plane.

A third contestant, `bare` (hack/bare-binder, `make bare-binder`), binds every pod round-robin
without scheduling: the apiserver's limit, against which the table puts gangsched's pods/s.

`--workload fifo-rounds` (issue 26) runs a stream of whole-node gangs in a fixed order, each
pod finished by the node agent after `--run-seconds`, against kube-scheduler, gangsched
(BestEffortFIFO) and gangsched-strict (`--queueing-strategy StrictFIFO`); its figures are
makespan, occupancy against strict FIFO's ideal, inversions and gaps between rounds
(bench/e2e/fifo.py), its plot GPU occupancy over time (<out>/occupancy-fifo-N<nodes>.png).

`--workload jobs` runs gangsched alone, fed the gangs of the default workload as PodGroups
(contestant `podgroups`) and as Indexed batch/v1 Jobs that the Job controller turns into
pods (contestant `jobs`: automatic gangs, issue 24).

`--kubelet` says what plays the nodes' kubelets: none (bound pods stay Pending; the default),
the node agent (`--agent`; fifo-rounds' default) or KWOK (`kwok`, bench/e2e/kwok.py), named in
every table's header and in the results' `kubelet` entry with what KWOK cost.

Writes <out>/results-<stem>.json, <out>/table-<stem>.md and <out>/bound-<stem>.png, and
prints the table; <stem> is N<nodes>, or dra-N<nodes> / preemption-N<nodes> / jobs-N<nodes>
with `--workload dra` / `--workload preemption` / `--workload jobs`. See
docs/benchmarks.md for the method and the numbers.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from gangsched_testing import devcluster

from . import fifo, kwok, metrics, report
from .harness import Bench, Options, bare_binder_binary
from .workload import Feed, Flavour, Topology, Workload, generate, generate_preemption, node_domains

CONTESTANTS: dict[str, Flavour] = {
    "gangsched": "gangsched",
    "native": "native",
    "kube-scheduler": "native",
    "bare": "bare",
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000, help="fake 8-GPU nodes (multiple of the rack size)")
    p.add_argument("--rack-size", type=int, default=None, help="default 10; fifo-rounds: 8")
    p.add_argument("--racks-per-block", type=int, default=10)
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help=f"default 1; fifo-rounds: {fifo.FIFO_SEED} (9 rounds at 32 nodes)",
    )
    p.add_argument(
        "--run-seconds",
        type=float,
        default=fifo.DEFAULT_RUN_SECONDS,
        help="fifo-rounds: how long each pod runs before the node agent finishes it (default 30)",
    )
    p.add_argument(
        "--workload",
        choices=("gpu", "dra", "preemption", "jobs", "fifo-rounds"),
        default="gpu",
        help="gpu: nvidia.com/gpu extended resources; dra: GPUs as fake-driver devices, a one-GPU "
        "ResourceClaimTemplate per GPU pod (needs kube-controller-manager); preemption: low-priority "
        "gangs fill the cluster, then high-priority gangs arrive that can only run by preempting "
        "(kube-scheduler with WorkloadAwarePreemption; try --nodes 200); jobs: the gpu workload's gangs "
        "as Indexed batch/v1 Jobs, gangsched only, against the same gangs as PodGroups "
        "(contestants podgroups and jobs; needs kube-controller-manager); fifo-rounds: issue 26's stream of "
        "53 whole-node gangs in FIFO order, each running --run-seconds (node agent on; --nodes 32)",
    )
    p.add_argument(
        "--high-share",
        type=float,
        default=0.5,
        help="preemption: high gangs' GPUs / cluster GPUs (default 0.5)",
    )
    p.add_argument(
        "--interval", type=float, default=2.0, help="preemption: seconds between two high gangs (default 2)"
    )
    p.add_argument(
        "--oversubscription", type=float, default=1.25, help="requested GPUs / cluster GPUs (default 1.25)"
    )
    p.add_argument(
        "--contestants",
        default=None,
        help="comma-separated, run in this order: gangsched, native (or kube-scheduler), bare (the "
        "round-robin binder of hack/bare-binder: no scheduling, the apiserver's limit; not with "
        "--workload preemption). Default: gangsched,native. With --workload jobs: podgroups, jobs "
        "(gangsched fed PodGroups, or Jobs); default podgroups,jobs",
    )
    p.add_argument(
        "--concurrent-job-syncs",
        type=int,
        default=None,
        help="kube-controller-manager --concurrent-job-syncs (its default: 5)",
    )
    p.add_argument("--repeat", type=int, default=1, help="runs per contestant; the order alternates")
    p.add_argument(
        "--concurrency", type=int, default=64, help="gangsched --concurrency, and the bare binder's -workers"
    )
    p.add_argument("--qps", type=int, default=1000, help="kube-scheduler clientConnection.qps")
    p.add_argument("--burst", type=int, default=2000, help="kube-scheduler clientConnection.burst")
    p.add_argument("--load-workers", type=int, default=16, help="threads creating pods")
    p.add_argument(
        "--foreign-pods",
        type=int,
        default=0,
        help="bound pods of another scheduler spread over the nodes before the contestants start "
        "(issue 27; bench/e2e/foreign.py); never part of the workload's figures",
    )
    p.add_argument("--quiet", type=float, default=12.0, help="end a run after this long without a binding")
    p.add_argument("--timeout", type=float, default=900.0, help="end a run after this long regardless")
    p.add_argument("--gap", type=float, default=2.0, help="partial gang: below quorum this long, no binding")
    p.add_argument("--agent", action="store_true", help="run the node agent (bound pods become Running)")
    p.add_argument(
        "--kubelet",
        choices=kwok.KUBELETS,
        default=None,
        help="what plays the nodes' kubelets: none (bound pods stay Pending), agent (the node agent, as "
        "--agent) or kwok (KWOK v0.8.0, `make kwok`: it makes the nodes Ready and runs their pods by its "
        "stages; bench/e2e/kwok.py). Default: agent with --agent or --workload fifo-rounds, else none",
    )
    p.add_argument("--no-oracle", action="store_true", help="skip the stranded-gang check")
    p.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="profile into this directory: py-spy (--gil) on gangsched, go tool pprof on kube-scheduler",
    )
    p.add_argument("--profile-seconds", type=float, default=20.0, help="kube-scheduler profile length")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument(
        "--replot",
        action="store_true",
        help="only redraw <out>/bound-N<nodes>.png from <out>/recordings-N<nodes>.json (same workload args)",
    )
    p.add_argument(
        "--retable",
        action="store_true",
        help="only rewrite <out>/table-N<nodes>.md from <out>/results-N<nodes>.json",
    )
    p.add_argument("--out", type=Path, default=Path("build/bench-e2e"))
    args = p.parse_args(argv)
    fifo_rounds = args.workload == "fifo-rounds"
    if args.rack_size is None:
        args.rack_size = 8 if fifo_rounds else 10
    if args.seed is None:
        args.seed = fifo.FIFO_SEED if fifo_rounds else 1
    _resolve_kubelet(p, args)
    return args


def _resolve_kubelet(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """`--kubelet` from `--agent` and the workload when not given; one kubelet at a time, and
    fifo-rounds needs one that finishes pods."""
    if args.kubelet is None:
        args.kubelet = "agent" if args.agent or args.workload == "fifo-rounds" else "none"
    elif args.agent and args.kubelet != "agent":
        p.error(f"--agent runs the node agent: not with --kubelet {args.kubelet}")
    if args.workload == "fifo-rounds" and args.kubelet == "none":
        p.error("--workload fifo-rounds needs a kubelet to finish its pods: --kubelet agent or kwok")
    if args.kubelet == "kwok" and not (args.retable or args.replot) and kwok.kwok_binary() is None:
        p.error("no kwok binary: run `make kwok` (needs Go >= 1.26), or set GANGSCHED_K8S_BIN")


JOBS_CONTESTANTS: Final[tuple[Feed, ...]] = ("podgroups", "jobs", "labelled-jobs")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.workload == "jobs":
        return jobs_main(args)
    if args.workload == "fifo-rounds":
        return fifo_main(args)
    contestants: list[Flavour] = []
    for name in (args.contestants or "gangsched,native").split(","):
        flavour = CONTESTANTS.get(name.strip())
        if flavour is None:
            print(f"unknown contestant {name!r} (gangsched, native or kube-scheduler, bare)", file=sys.stderr)
            return 2
        contestants.append(flavour)
    if "bare" in contestants and not (args.retable or args.replot):
        if args.workload == "preemption":
            print(
                "the bare binder never preempts: not a contestant of --workload preemption", file=sys.stderr
            )
            return 2
        if bare_binder_binary() is None:
            print("no bare-binder binary: run `make bare-binder` (needs Go >= 1.26)", file=sys.stderr)
            return 2
    if not args.no_plot and importlib.util.find_spec("matplotlib") is None:
        print("matplotlib is missing: pip install -e '.[bench]', or pass --no-plot", file=sys.stderr)
        return 2
    topology = Topology(nodes=args.nodes, rack_size=args.rack_size, racks_per_block=args.racks_per_block)
    log = _log
    options = _options(args)
    if args.workload == "preemption":
        workload = generate_preemption(topology, seed=args.seed, high_share=args.high_share)
    else:
        workload = generate(
            topology, seed=args.seed, oversubscription=args.oversubscription, kind=args.workload
        )
    stem = f"{'' if workload.kind == 'gpu' else workload.kind + '-'}N{args.nodes}"
    if workload.kind == "preemption":
        return preemption_main(args, workload, options, contestants, stem, log)
    saved = args.out / f"recordings-{stem}.json"
    figures: dict[str, list[metrics.Figures]] = {}
    if args.retable:
        results = json.loads((args.out / f"results-{stem}.json").read_text())
        if saved.exists():  # recompute from the raw recordings: picks up new metrics
            domains = node_domains(topology, pool=options.pool)
            for data in json.loads(saved.read_text()):
                rec = metrics.recording_from_json(data)
                fig = metrics.compute(rec, workload, domains, gap=args.gap)
                figures.setdefault(rec.contestant, []).append(fig)
        else:
            figures = {
                name: [metrics.figures_from_json(f) for f in runs] for name, runs in results["runs"].items()
            }
        print(_table(args, stem, report.workload_line(workload), results["machine"], report.table(figures)))
        return 0
    if args.replot:
        recs: dict[str, metrics.Recording] = {}
        for data in json.loads(saved.read_text()):
            rec = metrics.recording_from_json(data)
            recs.setdefault(rec.contestant, rec)
        report.plot(list(recs.values()), workload, args.out / f"bound-{stem}.png")
        return 0
    log(report.workload_line(workload))
    domains = node_domains(topology, pool=options.pool)
    recordings: dict[str, metrics.Recording] = {}  # the first run of each, for the plot
    every: list[metrics.Recording] = []
    with _control_plane(args) as cp, Bench(cp, workload, options, args.out) as bench:
        for i in range(args.repeat):
            order = contestants if i % 2 == 0 else contestants[::-1]
            for flavour in order:
                rec = bench.run(flavour, tag=str(i) if args.repeat > 1 else "")
                fig = metrics.compute(rec, workload, domains, gap=args.gap)
                figures.setdefault(flavour, []).append(fig)
                recordings.setdefault(flavour, rec)
                every.append(rec)
                if flavour == "bare":  # placement and correctness do not apply: it schedules nothing
                    log(
                        f"bare: {fig.pods_bound}/{fig.pods_created} pods, {fig.pods_per_second:.0f} pods/s, "
                        f"p50 {fig.gang_latency_p50:.2f}s, p99 {fig.gang_latency_p99:.2f}s, "
                        f"CPU {fig.cpu_seconds:.1f}s, RSS {fig.peak_rss_mib:.0f} MiB"
                    )
                    continue
                log(
                    f"{flavour}: {fig.pods_bound}/{fig.pods_created} pods, "
                    f"{fig.gangs_placed}/{fig.gangs} gangs, "
                    f"{fig.pods_per_second:.0f} pods/s, p50 {fig.gang_latency_p50:.2f}s, "
                    f"p99 {fig.gang_latency_p99:.2f}s, GPU {100 * fig.gpu_utilisation:.1f}%, "
                    f"partial {fig.partial_gangs}, CPU {fig.cpu_seconds:.1f}s, RSS {fig.peak_rss_mib:.0f} MiB"
                    + (
                        f", devices allocated twice {fig.devices_allocated_twice}"
                        if fig.devices_allocated_twice is not None
                        else ""
                    )
                )
    machine = _save(args, stem, saved, workload.summary(), workload, bench, every, figures)
    text = _table(args, stem, report.workload_line(workload), machine, report.table(figures))
    if not args.no_plot:
        png = args.out / f"bound-{stem}.png"
        report.plot(list(recordings.values()), workload, png)
        log(f"plot: {png}")
    print(text)
    return 0


def _table(args: argparse.Namespace, stem: str, head: str, machine: str, table: str) -> str:
    """<out>/table-<stem>.md: the workload line, the machine, the kubelet and the table; its text."""
    text = f"{head}\n\nMachine: {machine}\n\n{kwok.kubelet_line(args.kubelet)}\n\n{table}\n"
    (args.out / f"table-{stem}.md").write_text(text)
    return text


def _save(
    args: argparse.Namespace,
    stem: str,
    saved: Path,
    summary: Mapping[str, Any],
    workload: Workload,
    bench: Bench,
    every: Sequence[metrics.Recording],
    figures: Mapping[str, Sequence[Any]],
) -> str:
    """Every run's raw recording into `saved` (for --replot and for anyone re-analysing) and
    the results JSON (`summary` of the workload, each run's figures); returns the machine line."""
    saved.write_text(json.dumps([metrics.recording_to_json(r) for r in every]))
    machine = report.machine()
    result = {
        "workload": dict(summary),
        "topology": workload.topology.describe(),
        "seed": args.seed,
        "machine": machine,
        "kubelet": {"name": args.kubelet, **bench.kubelet_usage(every)},
        "options": {k: str(v) for k, v in vars(args).items()},
        "runs": {name: [f.as_dict() for f in runs] for name, runs in figures.items()},
    }
    (args.out / f"results-{stem}.json").write_text(json.dumps(result, indent=2, default=str))
    return machine


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _options(args: argparse.Namespace) -> Options:
    return Options(
        concurrency=args.concurrency,
        qps=args.qps,
        burst=args.burst,
        load_workers=args.load_workers,
        foreign_pods=args.foreign_pods,
        quiet=args.quiet,
        timeout=args.timeout,
        gap=args.gap,
        profile_dir=args.profile,
        profile_seconds=args.profile_seconds,
        agent=args.kubelet == "agent",
        kwok=args.kubelet == "kwok",
        oracle=not args.no_oracle,
        interval=args.interval,
        run_seconds=args.run_seconds if args.workload == "fifo-rounds" else None,
        log=_log,
    )


def _control_plane(args: argparse.Namespace) -> devcluster.ControlPlane:
    extra = (
        [] if args.concurrent_job_syncs is None else [f"--concurrent-job-syncs={args.concurrent_job_syncs}"]
    )
    return devcluster.ControlPlane(extra_controller_manager_args=extra)


def jobs_main(args: argparse.Namespace) -> int:
    """`--workload jobs`: gangsched fed the gpu workload's gangs as PodGroups (`podgroups`) and
    as Jobs (`jobs`), alternating; its own table (`report.jobs_table`)."""
    names: list[Feed] = []
    for name in (args.contestants or "podgroups,jobs").split(","):
        feed = next((f for f in JOBS_CONTESTANTS if f == name.strip()), None)
        if feed is None:
            print(
                f"--workload jobs: unknown contestant {name.strip()!r} (podgroups: gangsched fed "
                "PodGroups; jobs: gangsched fed Jobs, automatic gangs; labelled-jobs: Jobs whose "
                "pods name a PodGroup created first; kube-scheduler would need WorkloadWithJob, the "
                "bare binder schedules nothing)",
                file=sys.stderr,
            )
            return 2
        names.append(feed)
    if not args.no_plot and importlib.util.find_spec("matplotlib") is None:
        print("matplotlib is missing: pip install -e '.[bench]', or pass --no-plot", file=sys.stderr)
        return 2
    topology = Topology(nodes=args.nodes, rack_size=args.rack_size, racks_per_block=args.racks_per_block)
    workload = generate(topology, seed=args.seed, oversubscription=args.oversubscription, kind="jobs")
    options = _options(args)
    stem = f"jobs-N{args.nodes}"
    saved = args.out / f"recordings-{stem}.json"
    domains = node_domains(topology, pool=options.pool)
    figures: dict[str, list[metrics.Figures]] = {}
    first: dict[str, metrics.Recording] = {}
    if args.retable or args.replot:
        for data in json.loads(saved.read_text()):
            rec = metrics.recording_from_json(data)
            first.setdefault(rec.contestant, rec)
            figures.setdefault(rec.contestant, []).append(
                metrics.compute(rec, workload, domains, gap=args.gap)
            )
        machine = json.loads((args.out / f"results-{stem}.json").read_text())["machine"]
    else:
        _log(report.workload_line(workload))
        every: list[metrics.Recording] = []
        with _control_plane(args) as cp, Bench(cp, workload, options, args.out) as bench:
            for i in range(args.repeat):
                for name in names if i % 2 == 0 else names[::-1]:
                    rec = bench.run("gangsched", tag=str(i) if args.repeat > 1 else "", feed=name)
                    fig = metrics.compute(rec, workload, domains, gap=args.gap)
                    figures.setdefault(name, []).append(fig)
                    first.setdefault(name, rec)
                    every.append(rec)
                    _log(
                        f"{name}: {fig.pods_bound}/{workload.pods} pods ({fig.pods_created} created in "
                        f"{fig.created_span_s:.1f}s), {fig.gangs_placed}/{fig.gangs} gangs, "
                        f"{fig.pods_per_second:.0f} pods/s, p50 {fig.gang_latency_p50:.2f}s, "
                        f"p90 {fig.gang_latency_p90:.2f}s, p99 {fig.gang_latency_p99:.2f}s "
                        f"(from submission p50 {fig.submit_latency_p50:.2f}s), partial {fig.partial_gangs}, "
                        f"CPU {fig.cpu_seconds:.1f}s; requests {_top(fig.api_requests)}"
                    )
        machine = _save(args, stem, saved, workload.summary(), workload, bench, every, figures)
    if not args.no_plot and not args.retable:
        report.plot(list(first.values()), workload, args.out / f"bound-{stem}.png")
    if args.replot:
        return 0
    print(_table(args, stem, report.workload_line(workload), machine, report.jobs_table(figures)))
    return 0


def _top(requests: Mapping[str, float], n: int = 8) -> str:
    return ", ".join(f"{key} {count:.0f}" for key, count in list(requests.items())[:n])


def preemption_main(
    args: argparse.Namespace,
    workload: Workload,
    options: Options,
    contestants: Sequence[Flavour],
    stem: str,
    log: Callable[[str], None],
) -> int:
    """`--workload preemption`: its own figures and table (`metrics.compute_preemption`)."""
    saved = args.out / f"recordings-{stem}.json"
    figures: dict[str, list[metrics.PreemptionFigures]] = {}
    if args.retable or args.replot:
        recs = [metrics.recording_from_json(d) for d in json.loads(saved.read_text())]
        if args.replot:
            first = {r.contestant: r for r in reversed(recs)}
            report.plot(list(first.values()), workload, args.out / f"bound-{stem}.png")
            return 0
        for rec in recs:
            figures.setdefault(rec.contestant, []).append(
                metrics.compute_preemption(rec, workload, gap=args.gap)
            )
        machine = json.loads((args.out / f"results-{stem}.json").read_text())["machine"]
    else:
        log(report.workload_line(workload))
        every: list[metrics.Recording] = []
        with _control_plane(args) as cp, Bench(cp, workload, options, args.out) as bench:
            for i in range(args.repeat):
                for flavour in contestants if i % 2 == 0 else contestants[::-1]:
                    rec = bench.run(flavour, tag=str(i) if args.repeat > 1 else "")
                    fig = metrics.compute_preemption(rec, workload, gap=args.gap)
                    figures.setdefault(flavour, []).append(fig)
                    every.append(rec)
                    log(
                        f"{flavour}: high gangs {fig.high_placed}/{fig.high_gangs} placed, p50 "
                        f"{fig.high_latency_p50:.2f}s, p99 {fig.high_latency_p99:.2f}s; {fig.victims} "
                        f"victims in {fig.preemptions} preemptions ({fig.unattributed_victims} "
                        f"unattributed), partial victim gangs {fig.partial_victim_gangs}"
                        + (
                            f" ({'; '.join(fig.partial_victim_examples)})"
                            if fig.partial_victim_examples
                            else ""
                        )
                        + (f"; unplaced: {'; '.join(fig.high_unplaced)}" if fig.high_unplaced else "")
                    )
        machine = _save(args, stem, saved, workload.summary(), workload, bench, every, figures)
        if not args.no_plot:
            first = {r.contestant: r for r in reversed(every)}
            report.plot(list(first.values()), workload, args.out / f"bound-{stem}.png")
    print(_table(args, stem, report.workload_line(workload), machine, report.preemption_table(figures)))
    return 0


# fifo-rounds contestants: name -> (flavour, gangsched's extra arguments)
FIFO_CONTESTANTS: Final[dict[str, tuple[Flavour, tuple[str, ...]]]] = {
    "kube-scheduler": ("native", ()),
    "native": ("native", ()),
    "gangsched": ("gangsched", ()),
    "gangsched-strict": ("gangsched", ("--queueing-strategy", "StrictFIFO")),
    "gangsched-reserve0": ("gangsched", ("--reservation-after", "0")),
}


def fifo_main(args: argparse.Namespace) -> int:
    """`--workload fifo-rounds`: its own figures, table and plot (bench/e2e/fifo.py)."""
    chosen: list[str] = []
    for name in (args.contestants or "kube-scheduler,gangsched,gangsched-strict").split(","):
        if name.strip() not in FIFO_CONTESTANTS:
            print(
                f"--workload fifo-rounds: unknown contestant {name.strip()!r} "
                f"({', '.join(FIFO_CONTESTANTS)})",
                file=sys.stderr,
            )
            return 2
        chosen.append(name.strip())
    if not args.no_plot and importlib.util.find_spec("matplotlib") is None:
        print("matplotlib is missing: pip install -e '.[bench]', or pass --no-plot", file=sys.stderr)
        return 2
    topology = Topology(nodes=args.nodes, rack_size=args.rack_size, racks_per_block=args.racks_per_block)
    workload = fifo.generate_fifo_rounds(topology, seed=args.seed)
    sizes = [len(g.pods) for g in workload.gangs]
    rounds = len(fifo.strict_rounds(sizes, topology.nodes))
    line = report.fifo_workload_line(workload, args.run_seconds, rounds)
    options = _options(args)
    stem = f"fifo-N{args.nodes}"
    saved = args.out / f"recordings-{stem}.json"
    figures: dict[str, list[fifo.FifoFigures]] = {}
    first: dict[str, metrics.Recording] = {}
    if args.retable or args.replot:
        for data in json.loads(saved.read_text()):
            rec = metrics.recording_from_json(data)
            first.setdefault(rec.contestant, rec)
            figures.setdefault(rec.contestant, []).append(
                fifo.compute_fifo(rec, workload, run_seconds=args.run_seconds)
            )
        machine = json.loads((args.out / f"results-{stem}.json").read_text())["machine"]
    else:
        _log(line)
        every: list[metrics.Recording] = []
        with _control_plane(args) as cp, Bench(cp, workload, options, args.out) as bench:
            for i in range(args.repeat):
                for name in chosen if i % 2 == 0 else chosen[::-1]:
                    flavour, extra = FIFO_CONTESTANTS[name]
                    variant = None if flavour == "native" or not extra else name
                    rec = bench.run(
                        flavour, tag=str(i) if args.repeat > 1 else "", variant=variant, extra_args=extra
                    )
                    fig = fifo.compute_fifo(rec, workload, run_seconds=args.run_seconds)
                    figures.setdefault(rec.contestant, []).append(fig)
                    first.setdefault(rec.contestant, rec)
                    every.append(rec)
                    _log(
                        f"{name}: makespan {fig.makespan_s:.1f}s (ideal {fig.ideal_makespan_s:.0f}s), "
                        f"occupancy {fig.occupancy:.3f}, GPU busy {100 * fig.gpu_busy:.1f}%, "
                        f"inversions {fig.inversions}, largest gap {fig.largest_gap_s:.2f}s at "
                        f"{fig.largest_gap_at_s:.0f}s, gaps {fig.total_gap_s:.2f}s, "
                        f"{fig.gangs_started}/{fig.gangs} gangs, {fig.pods_finished}/{fig.pods} pods finished"
                    )
        summary = {**workload.summary(), "sizes": sizes, "rounds": rounds}
        machine = _save(args, stem, saved, summary, workload, bench, every, figures)
    if not args.no_plot and not args.retable:
        png = args.out / f"occupancy-{stem}.png"
        report.fifo_plot(list(first.values()), workload, args.run_seconds, png)
        _log(f"plot: {png}")
    if args.replot:
        return 0
    print(_table(args, stem, line, machine, report.fifo_table(figures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
