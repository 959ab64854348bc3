#!/usr/bin/python3
# log_schema.py - checks every line of the given log files against the JSON
# schema of docs/ops.md ("Log lines": the ```json block after the
# <!-- log-schema --> marker).  Usage: log_schema.py OPS_MD LOG...
# Exit 0 when every line is a JSON object the schema accepts; prints each
# offending line and why.
import json
import sys

import jsonschema


def schema_of(md):
    text = open(md, encoding="utf-8").read()
    at = text.index("<!-- log-schema -->")
    start = text.index("```json\n", at) + len("```json\n")
    end = text.index("```", start)
    return json.loads(text[start:end])


def main():
    schema = schema_of(sys.argv[1])
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    v = cls(schema)
    bad = lines = 0
    events = set()
    for path in sys.argv[2:]:
        with open(path, encoding="utf-8", errors="strict") as f:
            for n, line in enumerate(f, 1):
                lines += 1
                try:
                    obj = json.loads(line)
                except ValueError as e:
                    bad += 1
                    print(f"{path}:{n}: not JSON ({e}): {line.rstrip()}")
                    continue
                errs = sorted(v.iter_errors(obj), key=lambda e: e.path)
                for e in errs:
                    print(f"{path}:{n}: {e.message}: {line.rstrip()}")
                bad += 1 if errs else 0
                if isinstance(obj, dict):
                    events.add(obj.get("event"))
    print(f"{lines} lines, {bad} bad; events: "
          + " ".join(sorted(str(e) for e in events)))
    return 1 if bad or not lines else 0


if __name__ == "__main__":
    sys.exit(main())
