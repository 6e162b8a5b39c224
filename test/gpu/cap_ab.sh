#!/usr/bin/env bash
# test/gpu/cap_ab.sh: min-budget overhead under xseg's own cap
# (max_memory_mb), bisected to 1 MiB with one fresh process per try, for
# this tree and for BASE_TAR (a source archive of an earlier commit), on
# the GPU.  TRACES names the traces (default: the three whose min-budget a
# change near the limit moves most on the host).
#
#   BASE_TAR=base.tar.gz [TRACES="rmm_uniform ..."] test/gpu/cap_ab.sh
cd "$(dirname "$0")/../.." || exit 1
: "${BASE_TAR:?BASE_TAR: a source archive of the base commit}"
source test/gpu/ab.sh # the two builds and the A/B binaries, as for run.sh
build_ab_benches || exit 1
for t in ${TRACES:-rmm_uniform logrand grow_then_split}; do
  peak=$(trace_peak "benchmarks/traces/$t.trace")
  for which in new base; do
    bin=$(ab_bench "$which")
    fits() { "$bin" --backend cuda --conf "max_memory_mb:$1" replay "benchmarks/traces/$t.trace" 2>&1 | grep -q " 0 failed allocations"; }
    lo=$((peak / 1048576))
    hi=$(python3 -c "print(int($peak * 1.04 / 2**20) + 1)")
    fits "$hi" || { echo "$t $which: fails at $hi MiB"; continue; }
    while ((hi - lo > 1)); do
      mid=$(((lo + hi) / 2))
      if fits "$mid"; then hi=$mid; else lo=$mid; fi
    done
    python3 -c "print('%-16s %-4s min %6d MiB = %.4f of peak' % ('$t', '$which', $hi, $hi * 2**20 / $peak))"
  done
done
