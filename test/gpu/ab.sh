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
# The xseg-bench of A/B build $1: base (BASE_TAR's) or new (this tree's).
ab_bench() { if [[ $1 == base ]]; then echo /tmp/base-build/benchmarks/xseg-bench; else echo ./build-gpu/benchmarks/xseg-bench; fi; }
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
# xseg-bench built from BASE_TAR into /tmp/base-build.
build_base_bench() {
  rm -rf /tmp/base-src && mkdir -p /tmp/base-src && tar -C /tmp/base-src -xzf "$BASE_TAR" &&
    cmake -S /tmp/base-src -B /tmp/base-build -DCMAKE_BUILD_TYPE=Release -DXSEG_TESTS=OFF >/dev/null &&
    cmake --build /tmp/base-build -j"$(nproc)" --target xseg-bench >/dev/null || { echo "base build failed"; return 1; }
}
# The peak live bytes a trace file's header gives.
trace_peak() { sed -n 's/.*peak_live_bytes[ =:]*\([0-9]*\).*/\1/p' "$1" | head -1; }
