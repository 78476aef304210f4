"""Check an HVDSHIM_METRICS file against the schema in docs/OBSERVABILITY.md.

    python3 metrics-check.py FILE [key=value ...]

Every line must be one JSON object with exactly the documented keys and
types; steps count 1, 2, ...; times increase.  Each key=value must hold on
every line (a value 'null' means JSON null; '*' any non-null).  Prints the
number of lines; exits 1 naming the first violation."""
import json
import sys

SCHEMA = {  # key: allowed types (docs/OBSERVABILITY.md, "Metrics")
    "step": (int,), "time": (float,), "t": (float,), "wall_s": (float,),
    "samples": (int, type(None)), "ranks": (int,), "bytes_reduced": (int,),
    "tensors": (int,), "fusion_buffers": (int,), "blocked_s": (float,),
    "fusion_threshold": (int,), "cycle_time_ms": (int, float), "autotune": (str,),
}


def main():
    path, want = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
    lines = open(path).read().splitlines()
    if not lines:
        sys.exit("metrics: %s is empty" % path)
    last_t = -1.0
    for n, text in enumerate(lines, 1):
        where = "%s:%d" % (path, n)
        try:
            m = json.loads(text)
        except ValueError as e:
            sys.exit("metrics: %s: not JSON: %s" % (where, e))
        if set(m) != set(SCHEMA):
            sys.exit("metrics: %s: keys differ from the schema: extra %s, missing %s"
                     % (where, sorted(set(m) - set(SCHEMA)), sorted(set(SCHEMA) - set(m))))
        for k, types in SCHEMA.items():
            v = m[k]
            if isinstance(v, bool) or not isinstance(v, types):
                if not (float in types and isinstance(v, int)):
                    sys.exit("metrics: %s: %s=%r is not %s" % (where, k, v, "/".join(t.__name__ for t in types)))
        if m["step"] != n:
            sys.exit("metrics: %s: step %d, expected %d" % (where, m["step"], n))
        if m["t"] < last_t or m["wall_s"] < 0 or m["blocked_s"] < 0:
            sys.exit("metrics: %s: time went backwards or negative durations" % where)
        last_t = m["t"]
        if m["autotune"] not in ("off", "tuning", "fixed"):
            sys.exit("metrics: %s: autotune=%r" % (where, m["autotune"]))
        for k, v in want.items():
            got = m[k]
            ok = got is not None if v == "*" else (got is None if v == "null" else str(got) == v)
            if not ok:
                sys.exit("metrics: %s: %s=%r, expected %s" % (where, k, got, v))
    print("metrics: %d lines match the schema" % len(lines))


main()
