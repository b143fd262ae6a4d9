#!/usr/bin/env bash
# Runs the overhead benchmarks peer by peer in rounds (each round runs
# every peer once, so load on the machine falls on all of them alike) and
# prints each peer's median ns/op, B/op and allocs/op over the rounds, and
# the largest share of denied requests (a run with more than 0.01 % fails).
# Usage: bench/httppeers/run.sh [rounds, default 5]
set -euo pipefail
cd "$(dirname "$0")"
rounds=${1:-5}
peers="none batcher-httplimit batcher-httplimit-gcra go-chi-httprate sethvargo-httplimit didip-tollbooth"
out=$(mktemp)
bin="$out.test"
go test -c -o "$bin" . >/dev/null
for r in $(seq "$rounds"); do
  for p in $peers; do
    for b in Overhead OverheadSerial; do
      "$bin" -test.run '^$' -test.bench "^Benchmark$b/$p\$" -test.benchmem -test.benchtime 200000x |
        grep -E '^Benchmark' >>"$out"
    done
  done
done
awk '{ n=$1; sub(/-[0-9]+$/, "", n)
    for (i = 2; i < NF; i++) {
      if ($(i+1) == "ns/op") v[n]=v[n] " " $i
      if ($(i+1) == "B/op") b[n]=$i
      if ($(i+1) == "allocs/op") a[n]=$i
      if ($(i+1) == "%denied" && $i > d[n]) d[n]=$i
    } }
  END { for (n in v) { k=split(v[n], xs, " "); asort(xs); printf "%-45s %8.0f ns/op %5d B/op %3d allocs/op %6.3f %%denied (max)\n", n, xs[int((k+1)/2)], b[n], a[n], d[n] } }' "$out" | sort
rm -f "$out" "$bin"
