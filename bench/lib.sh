# shellcheck shell=bash
# lib.sh: what the benchmark drivers share (sourced by cnn-throughput.sh, gpt.sh,
# gpu-throughput.sh, map-threads.sh, monitoring-overhead.sh, multinode.sh,
# precision.sh, prefetch.sh and resnet.sh, which set prog, repo and data first).
#
# die MSG / say MSG            MSG on stderr after "$prog: "; die exits 2 (usage)
# positive FLAG VALUE          die unless VALUE is a whole number >= 1
# whole FLAG VALUE MIN         die unless VALUE is a whole number >= MIN
# bench_default_data DTRAIN    sets data (if empty) to $repo/data/fashion-mnist.h5,
#                              making it with the dtrain-prep beside DTRAIN when
#                              missing, and makes the path absolute
# bench_git_rev                sets git_rev: the commit, "(modified)" if dirty
# bench_about DTRAIN [NCPU]    sets dtrain_version (its --version line),
#                              git_rev, cpu_model and, given NCPU,
#                              busy_cores: what every driver's header reports
# bench_busy_cores NCPU        sets busy_cores: cores other work kept busy over
#                              2 s, with a warning above a quarter of a core
# bench_launcher [ROOT-FLAGS]  sets mpirun ($MPIRUN, default mpirun) and
#                              mpi_flags: as root under Open MPI
#                              --allow-run-as-root (and ROOT-FLAGS), then
#                              the words of $MPIRUN_FLAGS
# stats <<<"x y z"             numbers on stdin (one a line, or separated by
#                              blanks) -> "min median max"; nothing for none
# median <<<"x y z"            the same numbers -> their median; nothing for none
# bench_epoch_row, bench_no_figures, pair_median, pair_ratio: below
# bench_isa                    sets flags (/proc/cpuinfo's flags line) and isa:
#                              which of avx2 avx512f avx512_vnni avx512_bf16
#                              avx512_fp16 amx_tile amx_bf16 amx_fp16 it has
# bench_peaks PEAK             runs PEAK (bench/peak) 5 times on CPU 0; sets
#                              peak_gflops[UNIT] (fp32_fma, bf16_dot,
#                              amx_bf16; unset where unavailable) and
#                              peak_line, one line of them all
# bench_machine DTRAIN PEAK PRECISION... -- DTRAIN-ARGS...
#                              sets machine (array of report lines): the CPU,
#                              its ISA flags, one core's measured peaks
#                              (PEAK: bench/peak) and, per PRECISION, the
#                              oneDNN kernel each convolution ran and the
#                              fraction of that kernel's peak it reached
#                              (5 steps of DTRAIN-ARGS on CPU 0, ONEDNN_VERBOSE)
# bench_precisions LIST        sets precisions (array) from a comma list of
#                              fp32 and bf16 (--precision), or dies; bf16
#                              is dropped, with a line saying so, on a CPU
#                              without AVX512-BF16 or AMX-BF16 (dtrain
#                              refuses it there; bf16_dropped=1); a list of
#                              bf16 alone dies there
# ratios A B / ratio_row TEXT A B   per-round ratios A/B from the caller's
#                              sps["RUN ROUND"] over rounds 1..$repeats; the
#                              row prints their median, range and count

stats() {
    awk '{ for (i = 1; i <= NF; i++) print $i }' | sort -g | awk '
        { v[NR] = $1 }
        END { if (NR) printf "%s %s %s\n", v[1], (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[NR] }'
}
median() { local s; s=$(stats); [[ -z $s ]] || { s=${s#* }; echo "${s%% *}"; }; }

# prog comes from the sourcing script.
# shellcheck disable=SC2154
die() { echo "$prog: $*" >&2; exit 2; }
say() { echo "$prog: $*" >&2; }

positive() { # FLAG VALUE
    [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1: expected a positive whole number, found '$2'"
}

whole() { # FLAG VALUE MIN
    if [[ ! $2 =~ ^[0-9]+$ ]] || (($2 < $3)); then die "$1: expected a whole number >= $3, found '$2'"; fi
}

# repo and data come from the sourcing script.
# shellcheck disable=SC2154
bench_default_data() {
    local prep
    prep=$(dirname "$1")/dtrain-prep
    if [[ -z $data ]]; then
        data=$repo/data/fashion-mnist.h5
        if [[ ! -e $data ]]; then
            [[ -x $prep ]] || die "$data is missing and there is no $prep to make it (or pass --data FILE)"
            say "making $data with dtrain-prep"
            mkdir -p "$(dirname "$data")"
            "$prep" --quiet "$data" || die "dtrain-prep failed to make $data"
        fi
    fi
    [[ -r $data ]] || die "--data $data: no such readable file"
    data=$(cd "$(dirname "$data")" && pwd)/$(basename "$data")
}

bench_git_rev() {
    git_rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null) || git_rev="no commit"
    # (not "| grep -q .": under pipefail git's SIGPIPE would fail the test)
    if [[ -n $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
        git_rev+=" (modified)"
    fi
}

# shellcheck disable=SC2034  # cpu_model is for the sourcing script
bench_about() {
    dtrain_version=$("$1" --version 2>/dev/null | head -n 1) || dtrain_version=""
    [[ -n $dtrain_version ]] || dtrain_version="dtrain (version unknown)"
    bench_git_rev
    cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
    [[ -z ${2:-} ]] || bench_busy_cores "$2"
}

# Other work on the machine skews every figure; say how busy it was just
# before the start (measured over 2 s: the load average lags by a minute).
bench_busy_cores() {
    local busy0 all0 busy1 all1
    cpu_jiffies() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }
    read -r busy0 all0 < <(cpu_jiffies)
    sleep 2
    read -r busy1 all1 < <(cpu_jiffies)
    busy_cores=$(awk -v b=$((busy1 - busy0)) -v a=$((all1 - all0)) -v n="$1" 'BEGIN { printf "%.2f", (a > 0 ? n * b / a : 0) }')
    if awk -v c="$busy_cores" 'BEGIN { exit !(c > 0.25) }'; then
        say "warning: other work kept $busy_cores cores busy just before starting; every figure will show it"
    fi
}

bench_launcher() {
    mpirun=${MPIRUN:-mpirun}
    command -v "$mpirun" >/dev/null || die "no MPI launcher '$mpirun' (set MPIRUN)"
    mpi_flags=()
    # Open MPI refuses to start as root unless told; CI, containers and GPU
    # machines run as root. (The whole output is matched, not piped into
    # grep -q or head: under pipefail the launcher's SIGPIPE would fail it.)
    local version extra
    version=$("$mpirun" --version 2>/dev/null) || version=""
    if [[ $(id -u) == 0 && ($version == *"Open MPI"* || $version == *OpenRTE*) ]]; then
        mpi_flags+=(--allow-run-as-root "$@")
    fi
    read -r -a extra <<<"${MPIRUN_FLAGS:-}"
    mpi_flags+=("${extra[@]}")
}

# bench_cpu_bf16: whether dtrain runs --precision bf16 on this CPU (AVX512-BF16
# or AMX-BF16, what src/cpu/cpu_setup.c asks for).
bench_cpu_bf16() { grep -qw 'avx512_bf16\|amx_bf16' /proc/cpuinfo; }

bench_precisions() { # LIST
    local p words
    precisions=()
    IFS=, read -r -a words <<<"$1"
    [[ -n $1 && $1 != *, && $1 != ,* && $1 != *,,* ]] ||
        die "--precision: expected a comma list of fp32 and bf16, found '$1'"
    for p in "${words[@]}"; do
        [[ $p == fp32 || $p == bf16 ]] || die "--precision: expected a comma list of fp32 and bf16, found '$p' in '$1'"
        [[ " ${precisions[*]} " != *" $p "* ]] || die "--precision: '$p' is listed twice in '$1'"
        precisions+=("$p")
    done
    bf16_dropped=0
    if [[ " ${precisions[*]} " == *" bf16 "* ]] && ! bench_cpu_bf16; then
        ((${#precisions[@]} > 1)) ||
            die "--precision bf16: this CPU has neither AVX512-BF16 nor AMX-BF16, and dtrain refuses bf16 without them; use --precision fp32"
        precisions=(fp32)
        bf16_dropped=1
        say "bf16 not measured: this CPU has neither AVX512-BF16 nor AMX-BF16 (dtrain refuses --precision bf16 there)"
    fi
}

# bench_usage_env              the Environment part of a driver's --help
bench_usage_env() {
    cat <<'EOF'

Environment:
  MPIRUN          launcher (default: mpirun)
  MPIRUN_FLAGS    extra launcher flags, e.g. "--mca pml ob1 --mca btl self,vader"
EOF
}

# bench_epoch_row METRICS E    "steps seconds samples_per_s data_ms data_share"
#                              of epoch E's row in dtrain's --metrics CSV
#                              (columns by name; share = data_ms x steps /
#                              the epoch's milliseconds); nothing if absent
bench_epoch_row() {
    [[ -s $1 ]] || return 0
    awk -F, -v e="$2" '
        NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $c["kind"] == "epoch" && $c["epoch"] == e {
            st = $c["step"]; s = $c["seconds"]; d = $c["data_ms"]
            printf "%s %s %s %s %.6f\n", st, s, $c["samples_per_s"], d, (s > 0 ? d * st / (1000 * s) : 0)
        }' "$1"
}

# bench_no_figures WHAT RC LOG E   counts a run in failures and says why it
#                              gave no figures, with LOG's last lines
bench_no_figures() {
    failures=$((failures + 1))
    say "$1: exited with $2 or wrote no epoch $4 row; its last lines:"
    tail -n 10 "$3" | sed 's/^/    /' >&2
}

# pair_median NAME KEY A        the median over pairs 1..$pairs of array NAME's
#                              "KEY p A" figures; nothing for none
# pair_ratio NAME KEY A B       sets ratio to the median over the pairs of
#                              NAME["KEY p B"] / NAME["KEY p A"] where both
#                              exist ("" for none), nratios to how many did
pair_median() {
    local -n arr=$1
    local p
    for ((p = 1; p <= pairs; p++)); do echo "${arr["$2 $p $3"]:-}"; done | grep . | median || true
}
pair_ratio() {
    local -n arr=$1
    local p a b r=()
    for ((p = 1; p <= pairs; p++)); do
        a=${arr["$2 $p $3"]:-} b=${arr["$2 $p $4"]:-}
        [[ -n $a && -n $b ]] && r+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')")
    done
    nratios=${#r[@]} ratio=""
    ((nratios == 0)) || ratio=$(printf '%s\n' "${r[@]}" | median)
}

# sps and repeats come from the sourcing script.
# shellcheck disable=SC2154
ratios() { # A B -> A/B of each round where both gave a figure, one per line
    local r
    for ((r = 1; r <= repeats; r++)); do
        if [[ -n ${sps["$1 $r"]:-} && -n ${sps["$2 $r"]:-} ]]; then
            awk -v a="${sps["$1 $r"]}" -v b="${sps["$2 $r"]}" 'BEGIN { printf "%.4f\n", a / b }'
        fi
    done
}
ratio_row() { # TEXT A B: the median per-round ratio, its range and how many rounds gave one
    local s n mn md mx
    s=$(ratios "$2" "$3" | stats)
    n=$(ratios "$2" "$3" | wc -l)
    if [[ -n $s ]]; then
        read -r mn md mx <<<"$s"
        printf '%-44s %6.2f   (%.2f-%.2f, %d/%d rounds)\n' "$1" "$md" "$mn" "$mx" "$n" "$repeats"
    else
        printf '%-44s %6s   (0/%d rounds)\n' "$1" - "$repeats"
    fi
}

# goal_row TEXT FACTOR BASE PREC BATCH: what a goal of FACTOR x BASE
# samples/s asks of the core: the step of BATCH samples it allows, against
# the time PREC's convolutions would take at their kernels' peaks
# (bench_machine's "all convolutions" line, direct FLOP: a Winograd kernel
# does fewer). Above 100%, no direct kernel meets the goal here, whatever
# the rest of the step costs. Nothing where a figure is missing.
goal_row() {
    local at
    at=$(printf '%s\n' "${machine[@]}" | sed -n "s/^onednn $4: all convolutions: .*(\([0-9.]*\) ms at them)$/\1/p")
    [[ -n $3 && -n $at ]] || return 0
    awk -v t="$1" -v f="$2" -v base="$3" -v at="$at" -v b="$5" 'BEGIN {
        s = f * base; ms = 1000 * b / s
        printf "# %s: %.0f samples/s, a step of %d in %.1f ms; the convolutions'"'"' direct FLOP at their kernels'"'"' peaks take %.1f ms (%.0f%%)\n", t, s, b, ms, at, 100 * at / ms }'
}

bench_isa() {
    local f
    flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
    isa=""
    for f in avx2 avx512f avx512_vnni avx512_bf16 avx512_fp16 amx_tile amx_bf16 amx_fp16; do
        [[ " $flags " == *" $f "* ]] && isa+="${isa:+ }$f"
    done
    return 0 # (not the last flag's test: callers run under set -e)
}

bench_peaks() {
    local unit rest g
    declare -gA peak_gflops=()
    peak_line=""
    [[ -x $1 ]] || { peak_line="not measured (no $1; make bench/peak)"; return 0; }
    while read -r _ unit rest; do
        if [[ $rest == gflops=* ]]; then
            g=${rest#gflops=}; peak_gflops[$unit]=${g%% *}
            peak_line+="${peak_line:+, }$unit ${peak_gflops[$unit]} GFLOP/s"
        else
            peak_line+="${peak_line:+, }$unit ${rest%%:*}"
        fi
    done < <(taskset -c 0 "$1" --repeats 5 2>/dev/null | grep '^peak ')
    [[ -n $peak_line ]] || peak_line="bench/peak printed nothing"
}

# What every figure was measured on, before any figure: the CPU, its ISA,
# one core's peaks, and the kernels oneDNN dispatched for dtrain's
# convolutions. The kernels are read off a short run of the same model with
# ONEDNN_VERBOSE=1 (DNNL_VERBOSE for oneDNN before 2.5) and
# DTRAIN_KERNEL_VERBOSE=1 (dtrain's own kernels, "dtrain:avx2", in the same
# format): 5 steps on CPU 0 (or
# as many as the data holds), the first step dropped (cold caches), each convolution's FLOP (2 per
# multiply-add, from its problem descriptor) over its execution time. Each
# kernel is compared with the peak of the instructions it names: AMX
# (amx_bf16) for *amx*, AVX512-BF16 (bf16_dot) for a bf16 kernel without AMX,
# the fp32 FMA peak for the rest; "of peak" for all of them together is the
# time they would take at their peaks over the time they took. A Winograd
# kernel (--winograd) is credited the direct convolution's FLOP, so it can
# pass 100%: its line says so. A convolution with its max pool's backward
# folded in (dtrain_poolgrad) is credited the products it makes, a quarter
# of the direct ones (one pixel of each 2x2 window).
# cpu_model comes from bench_about.
# shellcheck disable=SC2154
bench_machine() {
    local dtrain=$1 peak=$2 prec prof rc steps
    local -a precs=()
    shift 2
    while (($#)) && [[ $1 != -- ]]; do precs+=("$1"); shift; done
    (($#)) && shift
    machine=()
    bench_isa
    machine+=("cpu: ${cpu_model:-unknown}; ISA: ${isa:-none of avx2 avx512f avx512_vnni avx512_bf16 avx512_fp16 amx}")
    [[ " $flags " == *" amx_bf16 "* || " $flags " != *" avx512_bf16 "* ]] ||
        machine+=("cpu: no AMX here: bf16 convolutions take the AVX512-BF16 path on this machine")
    [[ " $flags " == *" avx512_bf16 "* || " $flags " == *" amx_bf16 "* ]] ||
        machine+=("cpu: neither AVX512-BF16 nor AMX here: dtrain refuses --precision bf16$( ((${bf16_dropped:-0})) && echo ", so bf16 is not measured"; true)")
    bench_peaks "$peak"
    if [[ -x $peak ]]; then
        machine+=("peak (bench/peak, one core, median of 5): $peak_line")
    else
        machine+=("peak: $peak_line")
    fi
    prof=$(mktemp "${TMPDIR:-/tmp}/bench-onednn.XXXXXX")
    for prec in "${precs[@]}"; do
        rc=0
        ONEDNN_VERBOSE=1 DNNL_VERBOSE=1 DTRAIN_KERNEL_VERBOSE=1 OMP_NUM_THREADS=1 taskset -c 0 "$dtrain" "$@" \
            --precision "$prec" --epochs 1 --steps-per-epoch 5 --quiet --metrics "$prof.csv" >"$prof" 2>&1 </dev/null || rc=$?
        if ((rc != 0)); then
            machine+=("onednn $prec: the 5-step run with ONEDNN_VERBOSE=1 exited with $rc: $(tail -n 1 "$prof")")
            continue
        fi
        # The steps it took (fewer than 5 where the data is smaller), from its metrics.
        steps=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["kind"] == "epoch" { print $c["step"]; exit }' "$prof.csv" 2>/dev/null)
        if [[ ! $steps =~ ^[0-9]+$ ]] || ((steps < 2)); then
            machine+=("onednn $prec: the profiling run took ${steps:-no} step(s); at least 2 are needed (one is dropped)")
            continue
        fi
        mapfile -t -O "${#machine[@]}" machine < <(awk -F, -v prec="$prec" -v steps="$steps" \
            -v fma="${peak_gflops[fp32_fma]:-}" -v dot="${peak_gflops[bf16_dot]:-}" -v amx="${peak_gflops[amx_bf16]:-}" '
            /_verbose,info,oneDNN v/ { for (i = 1; i <= NF; i++) if ($i ~ /^oneDNN v/) version = $i }
            /_verbose,info,cpu,isa:/ { for (i = 1; i <= NF; i++) if ($i ~ /^isa:/) cpuisa = substr($i, 5) }
            /_verbose,/ {
                e = 0
                for (i = 1; i <= NF; i++) if ($i == "exec") { e = i; break }
                if (!e || $(e + 2) != "convolution") next
                n++; impl[n] = $(e + 3); dir[n] = $(e + 4); desc[n] = $(NF - 1); ms[n] = $NF
            }
            function num(d, key,   r) { return match(d, key "[0-9]+") ? substr(d, RSTART + length(key), RLENGTH - length(key)) + 0 : -1 }
            function peak_of(k) { return k ~ /amx/ ? amx : (prec == "bf16" && k ~ /bf16/ ? dot : fma) }
            END {
                if (!n) { printf "onednn %s: no convolution in the run (ONEDNN_VERBOSE printed none)\n", prec; exit }
                first = int(n / steps)   # the first step: cold caches, dropped
                for (i = first + 1; i <= n; i++) {
                    d = desc[i]; g = num(d, "g"); if (g < 1) g = 1
                    f = 2 * num(d, "mb") * num(d, "ic") / g * num(d, "oc") * num(d, "oh") * num(d, "ow") * num(d, "kh") * num(d, "kw")
                    if (impl[i] ~ /poolgrad/) f /= 4   # a max pool'"'"'s backward folded in: one pixel in four multiplied
                    short = dir[i] == "forward_training" ? "fwd" : (dir[i] == "backward_data" ? "bwd-data" : (dir[i] == "backward_weights" ? "bwd-weights" : dir[i]))
                    k = short " " impl[i] " " d
                    if (!(k in F)) order[++nk] = k
                    F[k] += f; T[k] += ms[i]; C[k]++
                    pkv = peak_of(impl[i]); tf += f; tt += ms[i]
                    if (pkv > 0) at_peak += f / (pkv * 1e6); else nopeak = 1
                    used[impl[i]] = 1
                }
                kernels = ""; for (u in used) kernels = kernels (kernels == "" ? "" : ", ") u
                if (version != "") printf "onednn %s: %s, CPU ISA \"%s\"; convolution kernels: %s\n", prec, version, cpuisa, kernels
                else printf "onednn %s: no convolution ran in oneDNN; convolution kernels: %s\n", prec, kernels
                for (j = 1; j <= nk; j++) {
                    k = order[j]; split(k, w, " "); pkv = peak_of(w[2])
                    printf "onednn %s:   %-11s %-30s %-58s %3d/step %6.2f ms %6.1f GFLOP/s%s\n", prec, w[1], w[2], w[3], C[k] / (steps - 1), T[k] / (steps - 1), F[k] / (T[k] * 1e6),
                        (pkv > 0 ? sprintf(" = %3.0f%% of %s", 100 * F[k] / (T[k] * 1e6) / pkv, w[2] ~ /amx/ ? "amx_bf16" : (prec == "bf16" && w[2] ~ /bf16/ ? "bf16_dot" : "fp32_fma")) : "") \
                        (w[2] ~ /wino/ ? " (Winograd: direct FLOP counted)" : "") \
                        (w[2] ~ /poolgrad/ ? " (pool backward folded in: the quarter of the products made counted)" : "")
                }
                printf "onednn %s: all convolutions: %.1f ms per step, %.1f GFLOP/s%s\n", prec, tt / (steps - 1), tf / (tt * 1e6),
                    (nopeak || tt <= 0 ? " (no peak measured)" : sprintf(", %.0f%% of their kernels'"'"' peaks (%.1f ms at them)", 100 * at_peak / tt, at_peak / (steps - 1)))
            }' "$prof")
    done
    rm -f "$prof" "$prof.csv"
}
