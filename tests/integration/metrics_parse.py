#!/usr/bin/python3
"""metrics_parse.py FILE TOOL MIN_COUNT [EXPECT...] - parses a /metrics
scrape with the Prometheus client's own parser and checks the per-tool
histogram of TOOL: cumulative buckets, +Inf equal to _count, _count >=
MIN_COUNT; the reload histogram likewise.  Each EXPECT is
NAME{label=value,...}OP NUMBER (OP one of == >= <=, no quotes, no spaces):
the sample of that name and exactly those labels must exist and compare so.
Prints "count=N" and exits 0, or prints why and exits 1."""
import re
import sys

from prometheus_client.parser import text_string_to_metric_families

text = open(sys.argv[1], encoding="utf-8").read()
tool, need = sys.argv[2], int(sys.argv[3])
fams = {f.name: f for f in text_string_to_metric_families(text)}
for want in ("toolhost_tool_calls", "toolhost_tool_permission_asks", "toolhost_sessions_opened",
             "toolhost_sessions", "toolhost_toolset_calls",
             "toolhost_toolset_call_duration_seconds", "toolhost_front_calls",
             "toolhost_front_call_duration_seconds", "toolhost_tool_call_duration_seconds",
             "toolhost_queue_depth", "toolhost_workers_busy",
             "toolhost_lost_workers", "process_resident_memory_bytes",
             "toolhost_reloads", "toolhost_connections_refused",
             "toolhost_connections_closed", "toolhost_protocol_errors",
             "toolhost_reload_duration_seconds"):
    if want not in fams:
        print("missing family", want, sorted(fams))
        sys.exit(1)
h = fams["toolhost_tool_call_duration_seconds"]
if h.type != "histogram":
    print("not a histogram:", h.type)
    sys.exit(1)
buckets, count, total = [], None, None
for s in h.samples:
    if s.labels.get("tool") != tool:
        continue
    if s.name.endswith("_bucket"):
        buckets.append((float(s.labels["le"]), s.value))
    elif s.name.endswith("_count"):
        count = s.value
    elif s.name.endswith("_sum"):
        total = s.value
if not buckets or count is None or total is None:
    print("no histogram for", tool)
    sys.exit(1)
if buckets[-1][0] != float("inf") or buckets[-1][1] != count:
    print("+Inf bucket", buckets[-1], "count", count)
    sys.exit(1)
for (a, x), (b, y) in zip(buckets, buckets[1:]):
    if not (a < b and x <= y):
        print("not cumulative:", (a, x), (b, y))
        sys.exit(1)
if count < need:
    print("count", count, "< wanted", need)
    sys.exit(1)
def check_hist(fam, labels):
    buckets, cnt = [], None
    for s in fam.samples:
        if any(s.labels.get(k) != v for k, v in labels.items()):
            continue
        if s.name.endswith("_bucket"):
            buckets.append((float(s.labels["le"]), s.value))
        elif s.name.endswith("_count"):
            cnt = s.value
    if not buckets or buckets[-1][0] != float("inf") or buckets[-1][1] != cnt:
        print("histogram", fam.name, buckets, cnt)
        sys.exit(1)
    for (a, x), (b, y) in zip(buckets, buckets[1:]):
        if not (a < b and x <= y):
            print("not cumulative:", fam.name, (a, x), (b, y))
            sys.exit(1)


if "toolhost_reload_duration_seconds" in fams:
    if fams["toolhost_reload_duration_seconds"].type != "histogram":
        print("reload duration is not a histogram")
        sys.exit(1)
    check_hist(fams["toolhost_reload_duration_seconds"], {})
for exp in sys.argv[4:]:
    m = re.fullmatch(r"([a-z_]+)(?:\{([^}]*)\})?(==|>=|<=)([0-9.e+-]+)", exp)
    if not m:
        print("bad expectation", exp)
        sys.exit(1)
    name, lab, op, val = m.group(1), m.group(2), m.group(3), float(m.group(4))
    want = dict(kv.split("=", 1) for kv in lab.split(",")) if lab else {}
    got = [s.value for f in fams.values() for s in f.samples
           if s.name == name and s.labels == want]
    if len(got) != 1:
        print("no single sample", exp, "found", got)
        sys.exit(1)
    v = got[0]
    if not {"==": v == val, ">=": v >= val, "<=": v <= val}[op]:
        print("sample", name, want, "is", v, "wanted", op, val)
        sys.exit(1)
ok = [s for s in fams["toolhost_tool_calls"].samples
      if s.labels.get("tool") == tool and s.labels.get("outcome") == "ok"]
if not ok or ok[0].value < need:
    print("calls_total{outcome=ok}", ok)
    sys.exit(1)
opened = sum(s.value for s in fams["toolhost_sessions_opened"].samples)
if opened < 1:
    print("no session counted", fams["toolhost_sessions_opened"].samples)
    sys.exit(1)
ts = [s for s in fams["toolhost_toolset_call_duration_seconds"].samples
      if s.labels.get("toolset") == "public" and s.name.endswith("_count")]
if not ts or ts[0].value < need:
    print("toolset public histogram", ts)
    sys.exit(1)
print("count=%d" % count)
