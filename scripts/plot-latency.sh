#!/usr/bin/env bash
# plot-latency.sh SAMPLES.csv OUT.png [PREFIX] — the latency distributions
# of the isolation and fairness scenarios (tierctl bench isolation|fairness
# --samples SAMPLES.csv) as a PNG: the share of jobs started within x ms, one
# line per phase (fairness: per phase and small tenant), x logarithmic.
# PREFIX keeps only the phases whose name starts with it (e.g. "fairness
# flood"). Needs gnuplot (Debian: apt-get install gnuplot-nox).
set -euo pipefail
[ $# -eq 2 ] || [ $# -eq 3 ] || { echo "usage: $0 SAMPLES.csv OUT.png [PREFIX]" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "$0: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
samples=$1 out=$2 prefix=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One file per phase: sorted latencies with their cumulative share.
plots=()
i=0
while IFS= read -r phase; do
  i=$((i + 1))
  awk -F, -v p="$phase" 'NR > 1 && $1 == p { print $2 }' "$samples" | sort -g |
    awk '{ v[NR] = $1 } END { for (k = 1; k <= NR; k++) print v[k], k / NR }' > "$tmp/$i.dat"
  title=${phase//\'/\'\'} # a quote inside gnuplot's single quotes is doubled
  plots+=("'$tmp/$i.dat' using 1:2 with steps lw 2 title '$title'")
done < <(awk -F, -v p="$prefix" 'NR > 1 && index($1, p) == 1 { print $1 }' "$samples" | sort -u)
[ ${#plots[@]} -gt 0 ] || { echo "$0: no phase in $samples starts with '$prefix'" >&2; exit 1; }

joined=$(IFS=,; echo "${plots[*]}")
gnuplot <<GP
set terminal pngcairo size 900,520 font ",10" noenhanced
set output '$out'
set title 'Insert to start latency per phase (tierctl bench --samples)'
set xlabel 'latency (ms, log scale)'
set ylabel 'share of jobs started'
set logscale x
set grid
set key bottom right
set yrange [0:1.02]
plot $joined
GP
echo "wrote $out"
