#!/usr/bin/env bash
# plot-latency.sh SAMPLES.csv OUT.png — the isolation scenario's latency
# distributions (tierctl bench isolation --samples SAMPLES.csv) as a PNG:
# the share of jobs started within x ms, one line per phase, x logarithmic.
# Needs gnuplot (Debian: apt-get install gnuplot-nox).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 SAMPLES.csv OUT.png" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "$0: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
samples=$1 out=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One file per phase: sorted latencies with their cumulative share.
plots=()
i=0
while IFS= read -r phase; do
  i=$((i + 1))
  awk -F, -v p="$phase" 'NR > 1 && $1 == p { print $2 }' "$samples" | sort -g |
    awk '{ v[NR] = $1 } END { for (k = 1; k <= NR; k++) print v[k], k / NR }' > "$tmp/$i.dat"
  plots+=("'$tmp/$i.dat' using 1:2 with steps lw 2 title '$phase'")
done < <(awk -F, 'NR > 1 { print $1 }' "$samples" | sort -u)

joined=$(IFS=,; echo "${plots[*]}")
gnuplot <<GP
set terminal pngcairo size 900,520 font ",10" noenhanced
set output '$out'
set title 'Insert to start latency of an enterprise stream (one job per 50 ms)'
set xlabel 'latency (ms, log scale)'
set ylabel 'share of jobs started'
set logscale x
set grid
set key bottom right
set yrange [0:1.02]
plot $joined
GP
echo "wrote $out"
