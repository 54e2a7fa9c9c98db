"""Benchmark: the Spark summary job on one hour of a large synthetic run.

Generates a synthetic archive (default: 24 sender + 24 receiver workers, 1-second
intervals for one hour; every log a worker writes: 3 per sender, 2 per receiver, so
120 interval logs x 3,600 = 432,000 interval histograms, of which the senders'
``send_failed_us`` ones are empty), summarizes it with ``local[2]``, and prints wall time
and histograms per second. Reference run in the same invocation: the in-process summary
``mqlab run`` writes (:func:`mqlab.analysis.job.summarize_run`: the same partial
and final steps in one process) on the same archive.
Goal: the Spark job under 60 s on a 2-core machine.

    .venv/bin/python bench/summarize.py [--senders 24 --receivers 24 --seconds 3600]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the synthetic archive is a test fixture (tests/fixtures)
    sys.path.insert(0, str(ROOT))

from tests.fixtures.synthetic import SyntheticSpec, write_synthetic_run  # noqa: E402

GOAL_S = 60.0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--senders", type=int, default=24)
    p.add_argument("--receivers", type=int, default=24)
    p.add_argument("--seconds", type=int, default=3600)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--no-reference", action="store_true", help="skip the in-process summary")
    args = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="mqlab-bench-"))
    try:
        t = time.perf_counter()
        run = write_synthetic_run(
            tmp,
            SyntheticSpec(
                sender_nodes=args.senders,
                receiver_nodes=args.receivers,
                sender_threads=1,
                receiver_threads=1,
                warmup_s=0,
                duration_s=args.seconds - 2,
                rate_per_thread=50,
                samples_per_interval=200,
                distinct_histograms=500,
                keep_samples=False,
            ),
        )
        logs = sorted(run.run_dir.glob("workers/*/*.hlog"))
        n_hist = sum(sum(1 for ln in f.open() if ln[:1].isdigit()) for f in logs)
        print(
            f"archive: {len(logs)} interval logs, {n_hist:,} interval histograms "
            f"({args.senders} senders x 3 metrics + {args.receivers} receivers x 2), "
            f"generated in {time.perf_counter() - t:.1f} s"
        )

        from spark.summarize import build_session, summarize_runs

        t = time.perf_counter()
        spark = build_session(args.master)
        startup = time.perf_counter() - t
        t = time.perf_counter()
        out = summarize_runs(spark, [run.run_dir], window_s=60)
        job = time.perf_counter() - t
        spark.stop()
        assert not out.runs[0].problems, out.runs[0].problems
        print(
            f"spark {args.master}: session start {startup:.1f} s, job {job:.1f} s "
            f"-> {n_hist / job:,.0f} histograms/s; goal < {GOAL_S:.0f} s: "
            f"{'met' if job < GOAL_S else 'NOT met'}"
        )
        if not args.no_reference:
            from mqlab.analysis.job import summarize_run

            t = time.perf_counter()
            local = summarize_run(run.run_dir)
            ref = time.perf_counter() - t
            same = local == out.runs[0].summary
            print(
                f"reference: in-process summary (1 process) {ref:.1f} s -> "
                f"{n_hist / ref:,.0f} histograms/s; ratio spark/reference "
                f"{job / ref:.2f}; identical summaries: {same}"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
