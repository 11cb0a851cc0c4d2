#!/usr/bin/env bash
# run-device-check.sh: the one script to run on a lent GPU machine, from the
# repository root: the GPU op checks (tests/check_gpu), training on the GPU
# against the CPU (tests/gpu_train.sh) and the GPU benchmark against PyTorch
# (bench/gpu-throughput.sh), with a summary, in about 5 minutes.
#
# The design decision a reader must know: GPU machines lent for a few minutes
# usually have CUDA, cuDNN and NCCL but no MPI, no HDF5, no compiler for
# them and no network, so nothing is built there. On the build machine
# `--stage DIR` gathers a --with-cuda build's executables, the non-CUDA
# libraries they load, Debian's Open MPI + parallel HDF5 packages
# (shared/device/fetch-bundle.sh) and the Fashion-MNIST files into one folder
# of about 40 MB; on the GPU machine `--staged DIR` unpacks it and runs
# everything from it. Each step has its own timeout, a failing step does not
# stop the later ones, and the exit status says whether all passed.
#
# Build machine:  tests/gpu/run-device-check.sh --stage .device --build build-cuda --mpibundle .mpibundle
# GPU machine:    tests/gpu/run-device-check.sh --staged .device [--out DIR]
# (or --build DIR / --make DIR with --mpibundle DIR and --data FILE.h5; see --help)
set -uo pipefail

prog=run-device-check.sh
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

usage() {
    cat <<EOF
Usage: tests/gpu/$prog --stage DIR --build BUILD --mpibundle BUNDLE [--bench-train N]
       tests/gpu/$prog --staged DIR [OPTIONS]
       tests/gpu/$prog (--build DIR | --make DIR) --data FILE.h5 [OPTIONS]

On the build machine, --stage DIR (inside the repository, e.g. .device, which
is then added to .git/info/exclude) fills DIR with what the GPU machine needs:
  DIR/build/          dtrain, dtrain-prep, tests/check_gpu, config.h and the
                      launcher flags of the --with-cuda build BUILD
  DIR/mpibundle.debs/ the .deb files of BUNDLE (BUNDLE.debs/, as
                      shared/device/fetch-bundle.sh leaves them) and env.sh
  DIR/payload.tar.xz  lib/: the libraries the executables load that are neither
                      glibc/libstdc++, CUDA nor in the bundle (oneDNN,
                      OpenBLAS, ...); data/: fm-small.h5 (4096 train, 1024 test
                      samples, as the tests' fm_small) and fm-bench.h5
                      (--bench-train samples, default 20000), made with
                      dtrain-prep from /usr/share/datasets/fashion-mnist
Carry DIR to the GPU machine and run there: tests/gpu/$prog --staged DIR

Running the checks:
  --staged DIR       use what --stage put in DIR (sets --build, --mpibundle,
                     --data and --bench-data)
  --build DIR        a built --with-cuda build folder (dtrain, dtrain-prep,
                     tests/check_gpu)
  --make DIR         configure DIR with --with-cuda if it has no Makefile, then
                     build dtrain, dtrain-prep and tests/check_gpu there
  --mpibundle DIR    Debian's Open MPI + HDF5 runtime: an unpacked bundle
                     (DIR/usr/bin/orterun) or a folder of its .debs (unpacked
                     here); its env.sh is sourced for the MPI steps
  --data FILE.h5     the small file tests/gpu_train.sh trains on
                     (DTRAIN_TEST_DATA; default: the tests' own fm_small)
  --bench-data FILE  the benchmark's data (default: --data)
  --out DIR          where the results go (default: \$OUT if set, else
                     ./device-check-out): summary.txt, env.txt, check_gpu.log,
                     gpu_train.log, bench.txt, bench.csv, logs.tar.gz
  --budget S         seconds for all the steps (default 270); the benchmark
                     gets what the others leave, less a margin
  --bench-repeats R  benchmark rounds (default 2)
  --bench-epochs E   epochs per benchmark run, the first dropped (default 3)
                     The benchmark runs the seed CNN (batch 64 and 512; and
                     at 64 with --cuda-graphs) and
                     ResNet-20 (batch 256, $bench_samples synthetic samples, so the
                     GPU has more to do than the CNN gives it) at fp32, bf16
                     and fp16, precision by precision: a short budget drops
                     fp16 and the second round first
  --no-bench         skip the benchmark
  -h, --help         show this help

Exit status: 0 every step passed, 1 a step failed, 2 bad usage,
77 nothing failed but a step was skipped (no GPU).
EOF
}

die() { echo "$prog: $*" >&2; exit 2; }
say() { echo "$prog: $*" >&2; }
abspath() { (cd "$(dirname "$1")" && echo "$(pwd)/$(basename "$1")"); }

stage="" staged="" build="" make_dir="" bundle="" data="" bench_data="" outdir=${OUT:-}
bench_train=20000 budget=270 bench_repeats=2 bench_epochs=3 want_bench=1
# ResNet-20's synthetic epoch: 50 steps of 256, a few seconds even for a slow
# backend, so a run stays well inside the benchmark's --run-timeout of 60 s.
bench_samples=12800
need() { (($2 > 1)) || die "$1 needs a value"; }
while (($#)); do
    case $1 in
        --stage) need "$1" $#; stage=$2; shift 2 ;;
        --staged) need "$1" $#; staged=$2; shift 2 ;;
        --build) need "$1" $#; build=$2; shift 2 ;;
        --make) need "$1" $#; make_dir=$2; shift 2 ;;
        --mpibundle) need "$1" $#; bundle=$2; shift 2 ;;
        --data) need "$1" $#; data=$2; shift 2 ;;
        --bench-data) need "$1" $#; bench_data=$2; shift 2 ;;
        --bench-train) need "$1" $#; bench_train=$2; shift 2 ;;
        --out) need "$1" $#; outdir=$2; shift 2 ;;
        --budget) need "$1" $#; budget=$2; shift 2 ;;
        --bench-repeats) need "$1" $#; bench_repeats=$2; shift 2 ;;
        --bench-epochs) need "$1" $#; bench_epochs=$2; shift 2 ;;
        --no-bench) want_bench=0; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "$prog: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
for v in bench_train budget bench_repeats bench_epochs; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v//_/-}: expected a positive whole number, found '${!v}'"
done

# ==== --stage: on the build machine ===============================================
# Libraries every GPU machine's image has, newer than Debian 12's: never carried.
system_lib() {
    case $1 in
        ld-linux*.so* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | \
            libresolv.so.* | libutil.so.* | libstdc++.so.* | libgcc_s.so.*) return 0 ;;
    esac
    return 1
}
# Libraries any Ubuntu has (apt and coreutils need them): carried, but used only
# where the GPU machine lacks them, since its own are newer.
fallback_lib() {
    case $1 in
        libz.so.1 | libzstd.so.1 | libudev.so.1 | libgmp.so.10) return 0 ;;
    esac
    return 1
}
# CUDA's own libraries come from the GPU machine (they must match its driver).
cuda_lib() {
    case $1 in
        libcuda.so* | libcudart.so* | libcublas*.so* | libcudnn*.so* | libnccl.so* | libnvrtc*.so* | \
            libnvJitLink.so* | libcufft*.so* | libcurand.so* | libcusparse*.so* | libcusolver*.so*) return 0 ;;
    esac
    return 1
}

do_stage() {
    local dir=$1 b bun debs f name path envsh tmp n=0
    [[ -n $build ]] || die "--stage needs --build BUILD (a --with-cuda build folder)"
    [[ -n $bundle ]] || die "--stage needs --mpibundle BUNDLE (the folder shared/device/fetch-bundle.sh filled)"
    b=$(cd "$build" 2>/dev/null && pwd) || die "--build $build: not a directory"
    for f in dtrain dtrain-prep; do [[ -x $b/$f ]] || die "--build $b: no $f (run make there)"; done
    grep -q 'define DT_HAVE_CUDA 1' "$b/config.h" 2>/dev/null || die "--build $b: not a --with-cuda build (config.h)"
    bun=$(cd "$bundle" 2>/dev/null && pwd) || die "--mpibundle $bundle: not a directory"
    [[ -x $bun/usr/bin/orterun ]] || die "--mpibundle $bun: not an unpacked bundle (no usr/bin/orterun)"
    debs=$bun.debs
    compgen -G "$debs/*.deb" >/dev/null || die "--mpibundle $bun: no .deb files in $debs (made by fetch-bundle.sh)"
    envsh=""
    for f in "$debs/env.sh" "$top/shared/device/env.sh" "$top/../shared/device/env.sh"; do
        [[ -f $f ]] && { envsh=$f; break; }
    done
    [[ -n $envsh ]] || die "no env.sh beside $debs or in shared/device/"

    # Only an earlier staging folder (or an empty one) is replaced.
    if [[ -e $dir && ! -f $dir/payload.tar.xz && -n $(ls -A "$dir" 2>/dev/null) ]]; then
        die "--stage $dir: exists and is not a staging folder; remove it or name another"
    fi
    { rm -rf "$dir" && mkdir -p "$dir/build/tests" "$dir/mpibundle.debs"; } || die "cannot make $dir"
    dir=$(cd "$dir" && pwd)
    cp "$b/dtrain" "$b/dtrain-prep" "$b/config.h" "$dir/build/"
    if [[ -x $b/tests/check_gpu ]]; then
        cp "$b/tests/check_gpu" "$dir/build/tests/"
    else
        say "warning: $b/tests/check_gpu is not built (make -C $b tests/check_gpu); the GPU op check will fail"
    fi
    sed -n 's/^MPIEXEC_FLAGS = //p' "$b/Makefile" >"$dir/build/mpiexec-flags" 2>/dev/null || true
    cp "$debs"/*.deb "$dir/mpibundle.debs/" && cp "$envsh" "$dir/mpibundle.debs/env.sh"

    tmp=$(mktemp -d "${TMPDIR:-/tmp}/device-stage.XXXXXX")
    mkdir -p "$tmp/lib/fallback" "$tmp/data"
    # Every library the executables load, less the system's, CUDA's and the bundle's.
    while read -r name path; do
        if system_lib "$name" || cuda_lib "$name" || [[ $path == /usr/local/cuda* ]]; then continue; fi
        [[ -z $(find "$bun" -name "$name" -print -quit) ]] || continue
        if fallback_lib "$name"; then cp -L "$path" "$tmp/lib/fallback/$name"; else cp -L "$path" "$tmp/lib/$name"; fi
        n=$((n + 1))
    done < <(for f in "$dir/build/dtrain" "$dir/build/dtrain-prep" "$dir/build/tests/check_gpu"; do
                 [[ -x $f ]] && ldd "$f"
             done | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u)
    say "carrying $n libraries: $(cd "$tmp/lib" && echo lib* fallback/*)"
    # The tests' fm_small subset, and a larger one for the benchmark.
    "$b/dtrain-prep" --quiet --limit-train 4096 --limit-test 1024 "$tmp/data/fm-small.h5" ||
        die "dtrain-prep could not make fm-small.h5 (Debian package dataset-fashion-mnist)"
    "$b/dtrain-prep" --quiet --limit-train "$bench_train" --limit-test 1024 "$tmp/data/fm-bench.h5" ||
        die "dtrain-prep could not make fm-bench.h5"
    say "compressing libraries and data (a minute)"
    tar -C "$tmp" -cf - lib data | xz -T0 -6 >"$dir/payload.tar.xz" || die "tar/xz failed"
    rm -rf "$tmp"
    cat >"$dir/README.txt" <<EOF
Made by tests/gpu/$prog --stage on $(uname -n), $(date -u +%Y-%m-%dT%H:%M:%SZ),
from $b (git $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?')).
On the GPU machine, from the repository root:
    bash tests/gpu/$prog --staged ${dir#"$top"/} --out DIR
EOF
    # Keep the staging folder out of git: it is carried, never committed.
    if [[ $dir == "$top"/* ]] && git -C "$top" rev-parse --git-dir >/dev/null 2>&1 &&
        ! git -C "$top" check-ignore -q "$dir"; then
        local exclude
        exclude=$(git -C "$top" rev-parse --git-path info/exclude)
        [[ $exclude == /* ]] || exclude=$top/$exclude
        mkdir -p "$(dirname "$exclude")" && echo "/${dir#"$top"/}/" >>"$exclude"
        say "added /${dir#"$top"/}/ to $exclude"
    fi
    du -sh "$dir"/* >&2
    du -sh "$dir" >&2
    local kib
    kib=$(du -sk "$dir" | cut -f1)
    ((kib < 60 * 1024)) || say "warning: $dir is $((kib / 1024)) MiB; a device run carries at most 64 MiB in all"
    say "staged in $dir; on the GPU machine: bash tests/gpu/$prog --staged ${dir#"$top"/}"
}

if [[ -n $stage ]]; then
    do_stage "$stage"
    exit 0
fi

# ==== Running the checks ==========================================================
start=$SECONDS
[[ -n $outdir ]] || outdir=$PWD/device-check-out
mkdir -p "$outdir" || die "--out $outdir: cannot make it"
outdir=$(cd "$outdir" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/device-check.XXXXXX") || die "no temporary folder"
mkdir -p "$work/logs"
trap 'rm -rf "$work"' EXIT
setup_log=$work/logs/setup.log
: >"$setup_log"
note() { echo "$*" | tee -a "$setup_log" >&2; }

if [[ -n $staged ]]; then
    [[ -d $staged ]] || die "--staged $staged: not a directory (make it with --stage on the build machine)"
    staged=$(cd "$staged" && pwd)
    [[ -f $staged/payload.tar.xz ]] || die "--staged $staged: no payload.tar.xz"
    note "unpacking $staged/payload.tar.xz"
    # Python's lzma where the image has no xz (minimal Ubuntu images lack xz-utils).
    if command -v xz >/dev/null; then
        xz -dc "$staged/payload.tar.xz" | tar -C "$work" -xf -
    else
        python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' \
            "$staged/payload.tar.xz" | tar -C "$work" -xf -
    fi || die "cannot unpack $staged/payload.tar.xz"
    build=${build:-$staged/build}
    bundle=${bundle:-$staged/mpibundle.debs}
    data=${data:-$work/data/fm-small.h5}
    bench_data=${bench_data:-$work/data/fm-bench.h5}
fi

if [[ -n $make_dir ]]; then
    [[ -z $build ]] || die "--make and --build (or --staged) exclude each other"
    mkdir -p "$make_dir" && make_dir=$(cd "$make_dir" && pwd)
    {
        if [[ ! -f $make_dir/Makefile ]]; then
            [[ -x $top/configure ]] || (cd "$top" && ./autogen.sh) || exit 1
            (cd "$make_dir" && "$top/configure" --with-cuda) || exit 1
        fi
        make -C "$make_dir" -j"$(nproc)" dtrain dtrain-prep || exit 1
        make -C "$make_dir" -j"$(nproc)" tests/check_gpu || echo "tests/check_gpu did not build"
    } >>"$setup_log" 2>&1 || { tail -n 30 "$setup_log" >&2; die "the build in $make_dir failed (see above)"; }
    build=$make_dir
fi
[[ -n $build ]] || die "say where dtrain is: --staged DIR, --build DIR or --make DIR"
build=$(cd "$build" 2>/dev/null && pwd) || die "--build $build: not a directory"
[[ -x $build/dtrain ]] || die "--build $build: no dtrain"
[[ -z $data ]] || { [[ -r $data ]] || die "--data $data: no such readable file"; data=$(abspath "$data"); }
bench_data=${bench_data:-$data}
[[ -z $bench_data ]] || { [[ -r $bench_data ]] || die "--bench-data $bench_data: no such readable file"; bench_data=$(abspath "$bench_data"); }

# ---- The machine, before any library path is changed (nvidia-smi, PyTorch) -------------
env_txt=$outdir/env.txt
{
    echo "# $prog on $(uname -n), $(date -u +%Y-%m-%dT%H:%M:%SZ); $(uname -sr); $(getconf _NPROCESSORS_ONLN) CPUs"
    echo "# repository $top, git $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?'); build $build"
    echo "## nvidia-smi"
    timeout 30 nvidia-smi 2>&1 || echo "(nvidia-smi: exit $?)"
    timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm --format=csv 2>&1 || true
    echo "## python3 / PyTorch"
    timeout 60 python3 -c 'import sys, torch; print(sys.executable, "torch", torch.__version__, "cuda", torch.version.cuda,
        "available", torch.cuda.is_available())' 2>&1 || echo "(no PyTorch)"
} >"$env_txt" 2>&1

# ---- MPI + HDF5 from the bundle, the carried libraries, CUDA's libraries -------------------
orig_ld_path=${LD_LIBRARY_PATH-}
if [[ -n $bundle ]]; then
    bundle=$(cd "$bundle" 2>/dev/null && pwd) || die "--mpibundle $bundle: not a directory"
    envsh=$bundle/env.sh
    [[ -f $envsh ]] || envsh=$bundle.debs/env.sh
    [[ -f $envsh ]] || envsh=$top/shared/device/env.sh
    [[ -f $envsh ]] || envsh=$top/../shared/device/env.sh
    [[ -f $envsh ]] || die "--mpibundle $bundle: no env.sh in it, beside it or in shared/device/"
    if [[ ! -x $bundle/usr/bin/orterun ]]; then
        compgen -G "$bundle/*.deb" >/dev/null || die "--mpibundle $bundle: neither an unpacked bundle nor a folder of .debs"
        note "unpacking $(find "$bundle" -maxdepth 1 -name '*.deb' | wc -l) packages of $bundle"
        for d in "$bundle"/*.deb; do dpkg-deb -x "$d" "$work/mpibundle" || die "dpkg-deb -x $d failed"; done
        # Debian makes these with update-alternatives at install time.
        ln -sf orterun "$work/mpibundle/usr/bin/mpirun"
        ln -sf orterun "$work/mpibundle/usr/bin/mpiexec"
        bundle=$work/mpibundle
    fi
    # shellcheck source=/dev/null
    . "$envsh" "$bundle" || die "sourcing $envsh $bundle failed"
    note "MPI bundle: $bundle (env.sh: $envsh)"
fi
if [[ -d $work/lib ]]; then
    cache=$(ldconfig -p 2>/dev/null) || cache=""
    for f in "$work/lib/fallback"/*; do
        [[ -e $f ]] || continue
        grep -q "^[[:space:]]*${f##*/} " <<<"$cache" && continue
        ln -s "fallback/${f##*/}" "$work/lib/${f##*/}"
        note "the system has no ${f##*/}: using the carried one"
    done
    export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$work/lib"
fi
# CUDA's libraries: where the image has them. A pip-installed PyTorch brings
# cuDNN, NCCL and cuBLAS in site-packages/nvidia/*/lib, not in /usr/local/cuda.
missing=$(for f in "$build/dtrain" "$build/tests/check_gpu"; do [[ -x $f ]] && ldd "$f"; done 2>/dev/null |
          awk '$2 == "=>" && $3 == "not" { print $1 }' | sort -u)
if [[ -n $missing ]]; then
    note "not found by the loader: $(tr '\n' ' ' <<<"$missing"); searching for them"
    roots=(/usr/local /opt /usr/lib /usr/lib64)
    site=$(LD_LIBRARY_PATH=$orig_ld_path timeout 30 python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) || site=""
    read -r -a site_dirs <<<"$site"
    for lib in $missing; do
        found=$(find "${site_dirs[@]}" "${roots[@]}" -name "$lib" \( -type f -o -type l \) -print -quit 2>/dev/null)
        if [[ -n $found ]]; then
            LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}${found%/*}"
            export LD_LIBRARY_PATH
            note "  $lib: $found"
        else
            note "  $lib: nowhere under ${site_dirs[*]} ${roots[*]}"
        fi
    done
fi

mpiexec=""
if [[ -n $bundle ]]; then
    mpiexec=$(command -v mpiexec)
elif [[ -f $build/Makefile ]]; then
    mpiexec=$(sed -n 's/^MPIEXEC = //p' "$build/Makefile")
fi
[[ -n $mpiexec && -x $mpiexec ]] || mpiexec=$(command -v mpiexec || command -v mpirun || echo mpiexec)
mpiexec_flags="--oversubscribe --mca pml ob1 --mca btl self,vader"
if [[ -f $build/Makefile ]]; then
    mpiexec_flags=$(sed -n 's/^MPIEXEC_FLAGS = //p' "$build/Makefile")
elif [[ -s $build/mpiexec-flags ]]; then
    mpiexec_flags=$(cat "$build/mpiexec-flags")
fi
[[ $(id -u) != 0 || $mpiexec_flags == *--allow-run-as-root* ]] || mpiexec_flags="--allow-run-as-root $mpiexec_flags"

{
    echo "## libraries and launcher"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    echo "MPIEXEC=$mpiexec MPIEXEC_FLAGS=$mpiexec_flags"
    "$mpiexec" --version 2>&1 | head -n 2
    cat "$setup_log"
    for f in "$build/dtrain" "$build/tests/check_gpu"; do
        echo "## ldd $f"
        if [[ -x $f ]]; then ldd "$f" 2>&1; else echo "(missing)"; fi
    done
    echo "## config.h"
    grep -E 'DT_HAVE_|PACKAGE_VERSION' "$build/config.h" 2>&1
} >>"$env_txt"

# ---- The steps ---------------------------------------------------------------------------
export MPIEXEC=$mpiexec MPIEXEC_FLAGS=$mpiexec_flags MPI_FLAVOUR=openmpi
export DTRAIN=$build/dtrain DTRAIN_PREP=$build/dtrain-prep MKFIXTURE=$build/tests/mkfixture
export TOP_SRCDIR=$top TOP_BUILDDIR=$build TEST_TMP=$work/tests-tmp CK_DEFAULT_TIMEOUT=120 OMP_NUM_THREADS=1
export DT_TEST_TIMEOUT=90 # one dtrain run in the shell tests (common.sh's launch)
[[ -z $data ]] || export DTRAIN_TEST_DATA=$data
mkdir -p "$TEST_TMP"

summary=$outdir/summary.txt
results=() npass=0 nfail=0 nskip=0
left() { echo $((budget - (SECONDS - start))); }
# step NAME LOGFILE TIMEOUT COMMAND...: runs one step with its own timeout and
# records PASS (exit 0), SKIP (77) or FAIL (anything else) with a reason.
step() {
    local name=$1 log=$2 limit=$3 rc=0 t0=$SECONDS verdict why
    shift 3
    if ((limit < 10)); then
        results+=("FAIL $name: not started, the --budget of $budget s is spent")
        nfail=$((nfail + 1))
        return
    fi
    say "$name (at most $limit s) ..."
    timeout -k 10 "$limit" "$@" >"$log" 2>&1 </dev/null || rc=$?
    case $rc in
        0) verdict=PASS why="" npass=$((npass + 1)) ;;
        77) verdict=SKIP why=": $(grep -m 1 -i 'skip\|no GPU' "$log")" nskip=$((nskip + 1)) ;;
        124 | 137) verdict=FAIL why=": timed out after $limit s" nfail=$((nfail + 1)) ;;
        *) verdict=FAIL why=": exit $rc" nfail=$((nfail + 1)) ;;
    esac
    results+=("$verdict $name ($((SECONDS - t0)) s)$why")
    say "${results[-1]}"
}

if [[ -x $build/tests/check_gpu ]]; then
    step check_gpu "$outdir/check_gpu.log" "$(($(left) < 150 ? $(left) : 150))" "$build/tests/check_gpu"
else
    echo "tests/check_gpu is not in $build: build it with make tests/check_gpu in a --with-cuda build" >"$outdir/check_gpu.log"
    results+=("FAIL check_gpu: not built ($build/tests/check_gpu missing)")
    nfail=$((nfail + 1))
fi
step gpu_train "$outdir/gpu_train.log" "$(($(left) < 200 ? $(left) : 200))" sh "$top/tests/gpu_train.sh"

if ((want_bench)); then
    if [[ -z $bench_data ]]; then
        echo "no --bench-data (or --data) file: the benchmark needs one" >"$outdir/bench.txt"
        results+=("FAIL bench: no data file (--bench-data)")
        nfail=$((nfail + 1))
    else
        # The benchmark stops starting runs in time to print its table before our budget ends.
        limit=$(left)
        step bench "$outdir/bench.txt" "$limit" \
            env MPIRUN="$mpiexec" MPIRUN_FLAGS="${mpiexec_flags//--allow-run-as-root/}" \
            TORCH_LD_LIBRARY_PATH="$orig_ld_path" \
            bash "$top/bench/gpu-throughput.sh" --build "$build" --data "$bench_data" \
            --models "cnn cnn-graphs resnet20" --batches cnn-graphs=64 --batches resnet20=256 \
            --samples "$bench_samples" \
            --repeats "$bench_repeats" --epochs "$bench_epochs" --deadline "$((limit > 40 ? limit - 25 : 15))" \
            --run-timeout 60 --out "$work/logs/bench.csv"
        [[ ! -f $work/logs/bench.csv ]] || cp "$work/logs/bench.csv" "$outdir/bench.csv"
    fi
fi

# ---- Summary ---------------------------------------------------------------------------
{
    echo "# $prog: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -n), $((SECONDS - start)) s"
    echo "# gpu: $(timeout 10 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
    echo "# build: $build; data: ${data:-fm_small}; bench data: ${bench_data:--}"
    printf '%s\n' "${results[@]}"
    echo
    echo "## check_gpu (last lines)"
    tail -n 5 "$outdir/check_gpu.log" 2>/dev/null
    echo "## gpu_train"
    grep -E '^(ok|FAIL|SKIP|GPU)' "$outdir/gpu_train.log" 2>/dev/null
    if [[ -f $outdir/bench.txt ]]; then
        echo "## bench"
        grep -v '^round ' "$outdir/bench.txt" | grep -v "^gpu-throughput.sh: round "
    fi
    echo
    echo "device check: $npass passed, $nfail failed, $nskip skipped"
} >"$summary"
tar -C "$work" -czf "$outdir/logs.tar.gz" logs 2>/dev/null || true
cat "$summary"
if ((nfail)); then exit 1; fi
if ((nskip)); then exit 77; fi
exit 0
