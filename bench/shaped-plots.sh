#!/usr/bin/env bash
# shaped-plots.sh: the two plots of doc/scaling.md's shaped-link study, from
# bench/shaped-study.sh's results directory (gnuplot; SVG).
#
#   bench/shaped-plots.sh RESULTS_DIR [OUT_DIR]
#
# shaped-throughput.svg  resnet32-wide4 on 2 hosts: steps/s against the
#                        link's rate, per --grad-compression (overlap on,
#                        the default across nodes), and 1 host's for scale
# shaped-predict.svg     dtrain-predict's step time against the measured one
#                        for every 2-host run of the study (its predict-*.txt
#                        files), with the 15% band
# OUT_DIR defaults to RESULTS_DIR.
set -euo pipefail
prog=shaped-plots.sh
die() { echo "$prog: error: $*" >&2; exit 2; }
[[ $# -ge 1 && -d $1 ]] || die "expected a bench/shaped-study.sh results directory, found '${1:-}'"
res=$(cd "$1" && pwd)
out=${2:-$res}
mkdir -p "$out"
command -v gnuplot >/dev/null || die "needs gnuplot (Debian: gnuplot-nox)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Throughput: one row per link rate (Mbit/s), a column per compression.
/usr/bin/python3 - "$res" "$tmp/tp.dat" <<'EOF'
import csv, os, sys
res, dat = sys.argv[1], sys.argv[2]
rates = [("100mbit", 100), ("300mbit", 300), ("1gbit", 1000)]
comps = ["none", "bf16", "fp16", "powersgd:4"]
with open(dat, "w") as f:
    f.write("# rate_mbit one_host " + " ".join(comps) + "\n")
    for name, mbit in rates:
        path = os.path.join(res, f"compress-{name}", "summary.csv")
        if not os.path.exists(path):
            continue
        rows = [r for r in csv.DictReader(open(path)) if r["overlap"] == "on"]
        one = [1e3 / float(r["step_ms"]) for r in rows if r["nodes"] == "1"]
        two = {r["grad_compression"]: 1e3 / float(r["step_ms"]) for r in rows if r["nodes"] == "2"}
        f.write(f"{mbit} {sum(one) / len(one):.4f} " + " ".join(f"{two.get(c, float('nan')):.4f}" for c in comps) + "\n")
EOF
gnuplot <<EOF
set terminal svg size 720,440 font "sans,12"
set output "$out/shaped-throughput.svg"
set title "resnet32-wide4, batch 16 per replica, 2 hosts x 1 core, shaped links (overlap on)"
set xlabel "link rate each way (Mbit/s, log scale)"
set ylabel "optimizer steps per second"
set logscale x
set xrange [85:1150]
set yrange [0:*]
set xtics (100, 300, 1000)
set key right bottom
set grid
plot "$tmp/tp.dat" using 1:2 with lines dashtype 2 lw 2 title "1 host (no exchange)", \
     "" using 1:3 with linespoints lw 2 pt 7 title "none", \
     "" using 1:4 with linespoints lw 2 pt 5 title "bf16", \
     "" using 1:5 with linespoints lw 2 pt 9 title "fp16", \
     "" using 1:6 with linespoints lw 2 pt 11 title "powersgd:4"
EOF

# Predicted against measured: the 2-host rows of every --compare output.
awk '$1 != "model" && $8 == 2 && NF >= 14 && $12 ~ /%$/ { print $10, $11, $3 }' "$res"/predict-*.txt >"$tmp/pm.dat"
[[ -s $tmp/pm.dat ]] || die "no 2-host rows in $res/predict-*.txt (run the study's predict part)"
gnuplot <<EOF
set terminal svg size 560,520 font "sans,12"
set output "$out/shaped-predict.svg"
set title "dtrain-predict against the shaped runs (2 hosts)"
set xlabel "measured step (ms, log scale)"
set ylabel "predicted step (ms, log scale)"
set logscale xy
set key left top
set grid
set xrange [50:4000]
set yrange [50:4000]
plot x with lines lc "black" title "predicted = measured", \
     1.15 * x with lines dashtype 2 lc "gray" title "+-15%", 0.85 * x with lines dashtype 2 lc "gray" notitle, \
     "$tmp/pm.dat" using 1:(strcol(3) eq "mpi" ? \$2 : 1/0) with points pt 6 ps 1.3 lc "red" title "mpi", \
     "" using 1:(strcol(3) eq "mpi" ? 1/0 : \$2) with points pt 7 ps 1 lc "blue" title "ring, hier, auto"
EOF
echo "$prog: wrote $out/shaped-throughput.svg and $out/shaped-predict.svg"
