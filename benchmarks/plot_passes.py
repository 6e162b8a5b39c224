#!/usr/bin/env python3
"""The passes plot for docs/benchmarks.md, as SVG (no plotting library).

    python3 benchmarks/plot_passes.py [RESULTS_DIR [OUT [PREFIX [MACHINE]]]]

Reads PREFIX-{native,xseg}.json (PREFIX: gpu-h100-torch-passes) from
RESULTS_DIR (default benchmarks/results; written by
test/gpu/torch_passes.py), and PREFIX-expandable.json and
PREFIX-xseg-base.json (xseg before a change) where there are,
and writes OUT (default docs/img/passes.svg): for each trace, microseconds
per event through PyTorch from an empty allocator and on the warm second
pass, one bar per allocator.  MACHINE names the GPU and torch in the titles
(default "H100, torch 2.11").
"""
import json
import os
import sys

ALLOCATORS = (("native", "#7f7f7f", "PyTorch default"), ("expandable", "#1f77b4", "expandable segments"),
              ("xseg-base", "#f4a582", "xseg before"), ("xseg", "#d62728", "xseg"))
PASSES = (("us_per_event_1", "from empty"), ("us_per_event_2", "warm (second pass)"))


def load(results, prefix):
    runs, allocs = {}, []
    for name, color, label in ALLOCATORS:
        path = os.path.join(results, "%s-%s.json" % (prefix, name))
        if name in ("expandable", "xseg-base") and not os.path.exists(path):
            continue
        allocs.append((name, color, label))
        with open(path) as f:
            for r in json.load(f):
                runs.setdefault(r["trace"], {})[name] = r
    return runs, allocs


def panel(runs, allocs, key, title, y0, width, height):
    traces = sorted(runs)
    top = max(max(runs[t][a][key] for a, _, _ in allocs) for t in traces)
    top = (int(top / 5) + 1) * 5
    left, plot_w, plot_h = 50, width - 70, height - 90
    out = ['<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>' % (left, y0 + 18, title)]
    base = y0 + 30 + plot_h
    for v in range(0, top + 1, 5):
        y = base - plot_h * v / top
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (left, left + plot_w, y, y))
        out.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%d</text>' % (left - 4, y + 3, v))
    group = plot_w / len(traces)
    bar = group * 0.8 / len(allocs)
    for i, t in enumerate(traces):
        for k, (a, color, _) in enumerate(allocs):
            v = runs[t][a][key]
            h = plot_h * v / top
            x = left + i * group + group * 0.1 + k * bar
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %.2f us</title>'
                       '</rect>' % (x, base - h, bar, h, color, t, a, v))
        cx = left + (i + 0.5) * group
        out.append('<text font-size="10" text-anchor="end" transform="translate(%.1f,%d) rotate(-35)">%s</text>'
                   % (cx, base + 12, t))
    out.append('<text x="14" y="%d" font-size="11" transform="rotate(-90 14 %d)">us / event</text>'
               % (base - plot_h / 2, base - plot_h / 2))
    return out


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results"
    out_path = sys.argv[2] if len(sys.argv) > 2 else "docs/img/passes.svg"
    prefix = sys.argv[3] if len(sys.argv) > 3 else "gpu-h100-torch-passes"
    try:
        runs, allocs = load(results, prefix)
    except (OSError, ValueError, KeyError) as e:
        sys.exit("plot_passes: cannot read %s-*.json in %s: %s" % (prefix, results, e))
    machine = sys.argv[4] if len(sys.argv) > 4 else "H100, torch 2.11"
    width, height = 900, 330
    body = []
    for n, (key, title) in enumerate(PASSES):
        body += panel(runs, allocs, key, "Trace replay through PyTorch, %s (%s)" % (title, machine), n * height, width,
                      height)
    legend_y = 2 * height + 10
    for k, (_, color, label) in enumerate(allocs):
        x = 60 + k * 200
        body.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>' % (x, legend_y, color))
        body.append('<text x="%d" y="%d" font-size="12">%s</text>' % (x + 18, legend_y + 11, label))
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">\n'
           '<rect width="100%%" height="100%%" fill="white"/>\n%s\n</svg>\n' % (width, 2 * height + 30, "\n".join(body)))
    with open(out_path, "w") as f:
        f.write(svg)
    print("wrote", out_path)


if __name__ == "__main__":
    main()
