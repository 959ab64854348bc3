#!/usr/bin/python3
"""metrics_parse.py FILE TOOL MIN_COUNT - parses a /metrics scrape with the
Prometheus client's own parser and checks the per-tool histogram of TOOL:
cumulative buckets, +Inf equal to _count, _count >= MIN_COUNT.  Prints
"count=N" and exits 0, or prints why and exits 1."""
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
             "toolhost_reloads"):
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
