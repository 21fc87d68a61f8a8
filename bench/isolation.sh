#!/bin/sh
# The cost of site isolation, measured: sitebench built at the last commit
# before it (the baseline: sites in the host's network namespace, uid 33,
# no seccomp, no per-site disk) and at this checkout, run alternately
# A B A B on this machine, with the per-pair ratio B/A of create → first
# 200 through the API and the edge (p50) and of the edge's requests/s.
#   bench/isolation.sh [pairs] [sites per run]
set -eu
pairs=${1:-2}
sites=${2:-6}
base=${ISOLATION_BASELINE:-b4888de}
go=${GO:-go}
work=$(mktemp -d /tmp/sbx-isobench-XXXXXX)
cleanup() { git worktree remove --force "$work/base" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT INT TERM
git worktree add --quiet --detach "$work/base" "$base"
(cd "$work/base" && $go build -o "$work/A" ./bench/sitebench)
$go build -o "$work/B" ./bench/sitebench
# create p50 (ms) and edge req/s from one sitebench output
pick() {
	awk '/create → first 200, API → edge/ { for (i = 1; i <= NF; i++) if ($i == "p50") c = $(i+1) }
	     /WordPress home page/ { for (i = 1; i <= NF; i++) if ($i == "edge") r = $(i+1) }
	     END { print c, r }' "$1"
}
echo "isolation cost: A = sitebench at $base (no isolation), B = this checkout; $sites sites per run"
i=1
while [ "$i" -le "$pairs" ]; do
	for v in A B; do
		"$work/$v" -sites "$sites" -duration 4s >"$work/$v$i.txt" 2>&1 || { cat "$work/$v$i.txt"; exit 1; }
	done
	set -- $(pick "$work/A$i.txt") $(pick "$work/B$i.txt")
	awk -v p="$i" -v ac="$1" -v ar="$2" -v bc="$3" -v br="$4" 'BEGIN {
		printf "  pair %d: create → first 200 p50 %s / %s ms (%.2fx); edge %s / %s req/s (%.2fx)\n", p, ac, bc, bc / ac, ar, br, br / ar }'
	i=$((i + 1))
done
