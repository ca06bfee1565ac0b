"""The demo's chart: the live view's samples, drawn as a PNG by gnuplot.

draw_chart() writes, in demo/out/ (gitignored):

  run.dat   the samples (live.Monitor.history): one block per queue, which
            gnuplot reads with `index`, then one per series of each track
            (live.Track: a scene's own series, e.g. jobs done per tenant);
            the scenes in its header comments
  run.gp    the gnuplot script that reads run.dat: `gnuplot demo/out/run.gp`
            draws the chart again
  run.png   two panels over the same time axis: queue depth (ready +
            running) and completion rate, one line per queue in the same
            colour in both, scene boundaries as dashed lines, dead-lettered
            jobs marked; then one panel per track, zoomed in on its scene:
            each series' jobs done as a share of its jobs, the moments the
            scene noted marked

and returns the lines to print about them. Without gnuplot (Debian package
gnuplot-nox) it writes the data, says so and draws nothing; the demo does not
fail over a chart.
"""

import math
import os
import shutil
import subprocess
import time

from live import RATE_WINDOW, SAMPLE_EVERY

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
COLUMNS = "t_s depth ready scheduled running expired dead done_recent jobs_per_s"
TRACK_COLUMNS = "t_s done unfinished done_pct"
TRACK_COLOURS = ["#d62728", "#2ca02c", "#9467bd", "#17becf", "#bcbd22", "#7f7f7f"]
TRACK_POINTS = [7, 5, 9, 11, 13, 3]    # circle, square, triangles, diamond, star
PANEL_HEIGHT = 450          # pixels per panel


def draw_chart(history, scenes, tracks=(), out_dir=OUT_DIR):
    """Writes run.dat and run.gp and runs gnuplot; returns lines to print."""
    queues = [q for q, series in history.items() if series]
    if not queues:
        return ["no samples of pgq.queue_stats: no chart"]
    # Each track as (title, samples, notes), copied once: sampling may go on.
    tracks = [(t.title, *t.copy()) for t in tracks]
    tracks = [t for t in tracks if any(t[1].values())]
    data, script, png = (os.path.join(out_dir, f"run.{ext}") for ext in ("dat", "gp", "png"))
    try:
        os.makedirs(out_dir, exist_ok=True)
        with open(data, "w", encoding="utf-8") as f:
            f.write(data_text(history, queues, scenes, tracks))
        with open(script, "w", encoding="utf-8") as f:
            f.write(gnuplot_script(data, png, history, queues, scenes, tracks))
    except OSError as exc:
        return [f"could not write the chart's files in {out_dir}: {exc}"]
    if shutil.which("gnuplot") is None:
        return [f"gnuplot is not installed (apt-get install gnuplot-nox): no chart; "
                f"the samples are in {data}"]
    try:
        run = subprocess.run(["gnuplot", script], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"gnuplot failed ({exc}): no chart; the samples are in {data}"]
    if run.returncode != 0:
        why = (run.stderr.strip().splitlines() or ["?"])[-1]
        return [f"gnuplot failed ({why}): no chart; see {script}"]
    shown = "".join(f", {t[0]}" for t in tracks)
    return [f"chart of this run: {png}",
            f"  queue depth and completions/s per queue, scenes marked{shown}; data {data}, "
            f"redraw with: gnuplot {script}"]


def data_text(history, queues, scenes, tracks):
    """run.dat: a header, then one block per queue and one per track series,
    two blank lines apart."""
    lines = [f"# pgq_cpp demo, {time.strftime('%Y-%m-%d %H:%M:%S')}: pgq.queue_stats sampled "
             f"every {SAMPLE_EVERY} s",
             "# t_s: seconds since the sampling started; depth = ready + running;",
             f"# jobs_per_s: completions (done_recent deltas) over the last {RATE_WINDOW:g} s",
             "# scenes (t_s label):"]
    lines += [f"#   {s.t:7.2f}  {s.label}" for s in scenes]
    for i, queue in enumerate(queues):
        lines += ["", ""] if i else []
        lines += [f"# queue {queue} (index {i})", f"# {COLUMNS}"]
        lines += [f"{s.t:.2f} {s.depth} {s.ready} {s.scheduled} {s.running} {s.expired} "
                  f"{s.dead} {s.done_recent} {s.rate:.2f}" for s in history[queue]]
    index = len(queues)
    for title, samples, notes in tracks:
        lines += [f"# notes of {title} (t_s text):"] + [f"#   {t:7.2f}  {n}" for t, n in notes]
        for series, points in samples.items():
            total = max(1, points[-1][1] + points[-1][2])
            lines += ["", "", f"# {title}: {series}, {total} jobs (index {index}); done_pct "
                              f"of those", f"# {TRACK_COLUMNS}"]
            lines += [f"{t:.2f} {done} {left} {done * 100 / total:.2f}"
                      for t, done, left in points]
            index += 1
    return "\n".join(lines) + "\n"


def gnuplot_script(data, png, history, queues, scenes, tracks):
    """run.gp: the header, the scene marks, then the panels."""
    end = max(series[-1].t for series in history.values() if series)
    small = small_queues(history, queues)
    panels = 2 + len(tracks)
    lines = [
        "# Draws run.png from run.dat; written by demo/chart.py.",
        f"set terminal pngcairo size 1400,{PANEL_HEIGHT * panels} font 'DejaVu Sans,11' "
        f"noenhanced",
        f"set output {quote(png)}",
        f"set multiplot layout {panels},1 title "
        f"'pgq_cpp demo run of {time.strftime('%Y-%m-%d %H:%M')}: its queues, "
        f"from pgq.queue_stats every {SAMPLE_EVERY} s' font ',15'",
        f"set xrange [0:{end * 1.02:.2f}]",  # the last sample off the border
        "set lmargin 10",
        "set rmargin 10",           # the same in both panels: their time axes line up
        "set grid xtics ytics lc rgb '#dddddd'",
        "set ytics nomirror",
    ]
    lines += scene_marks(scenes)
    lines += depth_panel(data, history, queues, small)
    lines += ["unset label", "set key off"]
    lines += rate_panel(data, history, queues, small)
    index = len(queues)
    for title, samples, notes in tracks:
        lines += track_panel(data, index, title, samples, notes)
        index += len(samples)
    lines += ["unset multiplot"]
    return "\n".join(lines) + "\n"


def small_queues(history, queues):
    """The queues so much quieter than the busiest one that they would be a
    flat line on its scale: they get the right-hand axis."""
    top_depth = peak(history, queues, "depth")
    top_rate = peak(history, queues, "rate")
    return {q for q in queues if peak(history, [q], "depth") < top_depth / 4
            and peak(history, [q], "rate") < top_rate / 4}


def peak(history, queues, field):
    return max((getattr(s, field) for q in queues for s in history[q]), default=0)


def axes_ranges(history, queues, small, field, whole):
    """yrange and y2range with headroom; whole numbers get whole tics."""
    lines = []
    for axis, members in (("y", [q for q in queues if q not in small]), ("y2", sorted(small))):
        if not members:
            lines += [f"unset {axis}tics", f"set {axis}label ''"]
            continue
        top = max(peak(history, members, field) * 1.15, 1)
        lines += [f"set {axis}range [0:{top:.2f}]",
                  f"set {axis}tics 0, {tic_step(top, whole):g} nomirror"]
    return lines


def tic_step(top, whole):
    """1, 2 or 5 times a power of ten: about eight tics up to top."""
    magnitude = 10 ** math.floor(math.log10(top / 8))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= top / 8)
    return max(1, round(step)) if whole else step


def depth_panel(data, history, queues, small):
    """Queue depth as steps, with markers where a lease expired (a worker
    died) and where a job was dead-lettered; the one legend, above it."""
    marks = [("lease expired, job requeued", 6, [s for q in queues
                                                 for s in rises(history[q], "expired")]),
             ("job dead-lettered", 2, [s for q in queues for s in rises(history[q], "dead")])]
    marks = [m for m in marks if m[2]]
    plots = [series_plot(data, i, q, 2, "steps", small) for i, q in enumerate(queues)]
    plots += [f"'-' using 1:2 axes x1y1 with points pt {pt} ps 2.2 lw 2 lc rgb 'black' "
              f"title {quote(title)}" for title, pt, _samples in marks]
    lines = ["set key outside top center horizontal maxrows 2 samplen 3 spacing 1.2",
             "set title 'Queue depth: jobs ready or running' font ',13'",
             "set ylabel 'jobs'",
             "set y2label 'jobs (right axis)'",
             "set format x ''"]
    lines += axes_ranges(history, queues, small, "depth", whole=True)
    lines += ["plot " + ", \\\n     ".join(plots)]
    for _title, _pt, samples in marks:
        lines += [f"{s.t:.2f} {s.depth}" for s in samples] + ["e"]
    return lines


def rate_panel(data, history, queues, small):
    plots = [series_plot(data, i, q, 9, "lines", small) for i, q in enumerate(queues)]
    return [f"set title 'Completion rate: jobs finished per second, over the last "
            f"{RATE_WINDOW:g} s (from done_recent)' font ',13'",
            "set ylabel 'jobs/s'",
            "set y2label 'jobs/s (right axis)'",
            "set format x '%g'",
            "set xlabel 'seconds since the scenario started'",
            *axes_ranges(history, queues, small, "rate", whole=False),
            "plot " + ", \\\n     ".join(plots)]


def track_panel(data, first_index, title, samples, notes):
    """A track's series as the share of their jobs done, over the seconds in
    which something moved (zoomed in: on the run's scale a scene of a few
    seconds is a sliver), with the scene's notes as dotted lines."""
    moved = [t for points in samples.values()
             for prev, (t, *counts) in zip(points, points[1:]) if counts != list(prev[1:])]
    start = min(p[0][0] for p in samples.values())
    stop = max(moved, default=start) + 1.0
    heading = (f"{title}, zoomed in on its scene: the share of each one's jobs done "
               f"(sampled every {SAMPLE_EVERY} s)")
    plots = []
    for i, (series, points) in enumerate(samples.items()):
        total = points[-1][1] + points[-1][2]
        # Thinner lines on top: series that end up together all stay visible.
        width = max(1.0, 4.0 - 1.2 * i)
        plots.append(f"{quote(data)} index {first_index + i} using 1:4 with linespoints "
                     f"lw {width:g} pt {TRACK_POINTS[i % len(TRACK_POINTS)]} ps 0.8 "
                     f"lc rgb '{TRACK_COLOURS[i % len(TRACK_COLOURS)]}' "
                     f"title {quote(f'{series}: {total} jobs')}")
    lines = ["unset arrow", "unset label", "unset y2tics", "set y2label ''",
             f"set xrange [{max(0.0, start - 0.3):.2f}:{stop:.2f}]",
             "set yrange [0:105]", "set ytics 0, 10 nomirror", "set format y '%g%%'",
             "set key inside right bottom box opaque samplen 3 spacing 1.2",
             f"set title {quote(heading)} font ',13'",
             "set ylabel 'jobs done'",
             "set xlabel 'seconds since the scenario started'"]
    for n, (t, text) in enumerate(notes, 1):
        lines.append(f"set arrow {n} from {t:.2f}, graph 0 to {t:.2f}, graph 1 "
                     f"nohead dt 3 lw 1.5 lc rgb 'gray30' back")
        # Below the 100% line, where the lines of the quiet series end.
        lines.append(f"set label {n} {quote(text)} at {t:.2f}, graph 0.9 rotate by 90 right "
                     f"offset 1.2, 0 tc rgb '#222222' front")
    lines += ["plot " + ", \\\n     ".join(plots)]
    return lines


def series_plot(data, index, queue, column, style, small):
    colour = COLOURS[index % len(COLOURS)]
    axes, title = ("x1y2", f"{queue} (right axis)") if queue in small else ("x1y1", queue)
    return (f"{quote(data)} index {index} using 1:{column} axes {axes} with {style} lw 2 "
            f"lc rgb '{colour}' title {quote(title)}")


def scene_marks(scenes):
    """A dashed line at each scene's start (both panels), its label on top."""
    lines = []
    for n, scene in enumerate(scenes, 1):
        lines.append(f"set arrow {n} from {scene.t:.2f}, graph 0 to {scene.t:.2f}, graph 1 "
                     f"nohead dt 2 lw 1.5 lc rgb 'gray40' back")
        lines.append(f"set label {n} {quote('scene ' + scene.label)} at {scene.t:.2f}, "
                     f"graph 0.98 rotate by 90 right offset 1.2, 0 tc rgb '#222222' front")
    return lines


def rises(series, field):
    """The samples where a count went up (e.g. dead: a job was dead-lettered)."""
    return [s for prev, s in zip(series, series[1:])
            if getattr(s, field) > getattr(prev, field)]


def quote(text):
    return "'" + str(text).replace("'", "''") + "'"
