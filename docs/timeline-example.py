"""Draw a hvdshim timeline (Chrome trace JSON) as Perfetto lays it out: one
row per tensor, one bar per phase.  Makes docs/timeline-example.png from
docs/timeline-example.json; needs matplotlib (python3-matplotlib).

    /usr/bin/python3 docs/timeline-example.py [TRACE.json [OUT.png]]
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "timeline-example.json")
dst = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "timeline-example.png")
ev = json.load(open(src))
names = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
spans = [e for e in ev if e.get("ph") == "X"]
marks = [e for e in ev if e.get("ph") == "i"]
lanes = sorted({e["tid"] for e in spans})
colors = {}
MIN_MS = 0.15
palette = plt.get_cmap("tab10").colors
fig, ax = plt.subplots(figsize=(11, 0.45 * len(lanes) + 1.6))
for e in spans:
    c = colors.setdefault(e["name"], palette[len(colors) % len(palette)])
    # phases shorter than MIN_MS are drawn MIN_MS wide, or they would not show
    ax.barh(lanes.index(e["tid"]), max(e["dur"] / 1e3, MIN_MS), left=e["ts"] / 1e3, color=c, height=0.7)
for m in marks:
    ax.axvline(m["ts"] / 1e3, color="#ccc", linewidth=0.5, zorder=0)
ax.set_yticks(range(len(lanes)))
ax.set_yticklabels([names.get(t, str(t)) for t in lanes], fontsize=8)
ax.invert_yaxis()
ax.set_xlabel("ms since the engine started (grey lines: CYCLE_START; bars at least %g ms wide)" % MIN_MS)
ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()], labels=list(colors),
          fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
ax.set_title("hvdshim timeline: %s" % os.path.basename(src))
fig.tight_layout()
fig.savefig(dst, dpi=90)
print("wrote", dst)
