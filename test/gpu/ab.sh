# test/gpu/ab.sh: helpers for comparing this tree with a base commit on the
# GPU, sourced by run.sh and cap_ab.sh (from the repository root).
#   BASE_TAR   a source archive of the base commit (git archive | gzip)
#   AB_ROUNDS  rounds (2), numbered after AB_ROUND0 (0), so that a second
#              call can go on where the first stopped

# A/B round numbers.
ab_rounds() { seq $((${AB_ROUND0:-0} + 1)) $((${AB_ROUND0:-0} + ${AB_ROUNDS:-2})); }
# Which build runs first in A/B round $1: the base in odd rounds, this tree
# in even ones, so that neither always runs first (or last).
ab_order() { if (($1 % 2)); then echo base new; else echo new base; fi; }
# The xseg-bench of A/B build $1: base (BASE_TAR's) or new (this tree's),
# both built by build_ab_benches in the same way.
ab_bench() { echo "/tmp/$1-build/benchmarks/xseg-bench"; }
# Run "$@" for each A/B round and each build in its order, with $round,
# $which and $bin (that build's xseg-bench) set.
ab_each() {
  for round in $(ab_rounds); do
    for which in $(ab_order "$round"); do
      bin=$(ab_bench "$which")
      "$@"
    done
  done
}
# xseg-bench built from source dir $1 into build dir $2, as for an A/B.
build_ab_bench() {
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DXSEG_TESTS=OFF >/dev/null &&
    cmake --build "$2" -j"$(nproc)" --target xseg-bench >/dev/null || { echo "build of $1 failed"; return 1; }
}
# Both A/B benches: BASE_TAR's into /tmp/base-build, this tree's into
# /tmp/new-build, with the same options, so that the two builds differ in
# their code only.  (On the H100, 2026-11-25, the same code built here and
# in build-gpu, run alternately, differed no more than runs of one build:
# up to 3x per event on replays of 15-60 ms; benchmarks/results/
# gpu-h100-aa-builds.txt.)
build_ab_benches() {
  rm -rf /tmp/base-src /tmp/base-build /tmp/new-build && mkdir -p /tmp/base-src &&
    tar -C /tmp/base-src -xzf "$BASE_TAR" && build_ab_bench /tmp/base-src /tmp/base-build &&
    build_ab_bench "$PWD" /tmp/new-build
}
# The peak live bytes a trace file's header gives.
trace_peak() { sed -n 's/.*peak_live_bytes[ =:]*\([0-9]*\).*/\1/p' "$1" | head -1; }
