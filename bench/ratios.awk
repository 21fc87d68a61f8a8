# Reads `go test -bench` output and prints each benchmark's ns/op as a
# ratio to the sub-benchmark named baseline* of the same group.
/^Benchmark/ {
  name = $1; sub(/-[0-9]+$/, "", name)
  group = name; sub(/\/[^\/]*$/, "", group)
  for (i = 1; i <= NF; i++) if ($(i+1) == "ns/op") ns = $i
  order[++n] = name; val[name] = ns; grp[name] = group
  if (name ~ /\/baseline/) base[group] = ns
}
END {
  for (i = 1; i <= n; i++) {
    nm = order[i]; b = base[grp[nm]]
    if (b > 0) printf "  %-48s %12.0f ns/op  %6.2fx baseline\n", nm, val[nm], val[nm] / b
    else printf "  %-48s %12.0f ns/op\n", nm, val[nm]
  }
}
