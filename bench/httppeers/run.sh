#!/usr/bin/env bash
# Runs the overhead benchmarks peer by peer in rounds (each round runs
# every peer once, so load on the machine falls on all of them alike) and
# prints each peer's median ns/op, B/op and allocs/op over the rounds.
# Usage: bench/httppeers/run.sh [rounds, default 5]
set -euo pipefail
cd "$(dirname "$0")"
rounds=${1:-5}
peers="none batcher-httplimit batcher-httplimit-gcra go-chi-httprate sethvargo-httplimit didip-tollbooth"
go test -c -o /tmp/httppeers.test . >/dev/null
out=$(mktemp)
for r in $(seq "$rounds"); do
  for p in $peers; do
    for b in Overhead OverheadSerial; do
      /tmp/httppeers.test -test.run '^$' -test.bench "^Benchmark$b/$p\$" -test.benchmem -test.benchtime 200000x |
        grep -E '^Benchmark' >>"$out"
    done
  done
done
awk '{ n=$1; sub(/-[0-9]+$/, "", n); v[n]=v[n] " " $3; b[n]=$5; a[n]=$7 }
  END { for (n in v) { k=split(v[n], xs, " "); asort(xs); printf "%-45s %8.0f ns/op %5d B/op %3d allocs/op\n", n, xs[int((k+1)/2)], b[n], a[n] } }' "$out" | sort
rm -f "$out"
