#!/usr/bin/env python3
"""Markdown table of sg-bench-halo exchange lines (JSON), one row per
(split, layout, message, width) at 64 KiB and above: per block kind the
median exchange time and the median, range of exchange / ping-pong over
the runs; the contiguous run length of the slab; and the bound a slab of
short rows leaves: one-way ping-pong / (pack + unpack of the slab, hot
block, one rank alone), since every rank both gathers its slab and
scatters its neighbour's."""
import collections
import json
import statistics as st
import sys

rows = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sys.argv[1:]:
    for line in open(f):
        if not line.startswith("{"):
            continue
        j = json.loads(line)
        if j.get("bench") != "halo_exchange" or j["msg_bytes"] < 65536:
            continue
        k = (j["split"], j["layout"], j["msg_bytes"], j["width"])
        rows[k][j.get("block", "user")].append(j)

print("| split | layout | message | width | run | user blocks: µs, ratio med [range] "
      "| plan blocks: µs, ratio med [range] | ping-pong µs | pp / (pack + unpack) |")
print("|---|---|---|---|---|---|---|---|---|")
for k in sorted(rows):
    split, layout, msg, width = k
    cells = []
    for b in ("user", "plan"):
        js = rows[k].get(b, [])
        if not js:
            cells.append("-")
            continue
        r = [j["exchange_vs_pingpong"] for j in js]
        cells.append("%.1f, **%.2f** [%.2f-%.2f]" % (
            st.median(j["exchange_us"] for j in js), st.median(r), min(r), max(r)))
    allj = rows[k]["user"] + rows[k]["plan"]
    pp = st.median(j["pingpong_oneway_us"] for j in allj)
    pu = st.median(j["pack_us"] + j["unpack_us"] for j in allj)
    if split == "h":
        run = "one run" if layout == "channels-last" else "4 runs"
    else:
        run = "%d B" % (width * 4 * (4 if layout == "channels-last" else 1))
    print("| %s | %s | %d KiB | %d | %s | %s | %s | %.1f | %.2f |" % (
        split, layout, msg // 1024, width, run, cells[0], cells[1], pp, pp / pu))
