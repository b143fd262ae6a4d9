#!/usr/bin/env bash
# Runs the peer benchmarks three times, interleaved (every peer once per
# round), and prints the median of each figure. Usage, from the repository
# root, with Redis on BATCHER_REDIS_ADDR (default 127.0.0.1:6379):
#   bash bench/limitpeers/run.sh [benchmark regexp] [benchtime]
set -euo pipefail
cd "$(dirname "$0")"
pattern="${1:-.}"
benchtime="${2:-1s}"
out="$(mktemp)"
for round in 1 2 3; do
  echo "== round $round" >&2
  go test -run XXX -bench "$pattern" -benchtime "$benchtime" . | tee -a "$out" >&2
done
# Median of the three values of each unit, per benchmark.
awk '
/^Benchmark/ {
  name = $1
  for (i = 3; i < NF; i += 2) { key = name SUBSEP $(i+1); vals[key] = vals[key] " " $i; units[name] = units[name] " " $(i+1) }
  names[name] = 1
}
END {
  for (name in names) {
    split(units[name], us, " "); line = name; seen = ""
    for (u in us) {
      unit = us[u]
      if (index(seen, "|" unit "|")) continue
      seen = seen "|" unit "|"
      n = split(vals[name SUBSEP unit], v, " ")
      # sort numerically (n is 3)
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
      line = line "  " v[int((n + 1) / 2)] " " unit
    }
    print line
  }
}' "$out" | sort
rm -f "$out"
