#!/usr/bin/env bash
# test/gpu/run.sh: build and run the GPU suite on a machine with an NVIDIA GPU,
# in one call.  Results and logs go to $OUT (default ./gpu-out).
#
#   test/gpu/run.sh [tests] [bench] [frag] [torch] [replay] [record] [quick]
#
#   tests  the ctest suite: GPU tests (label gpu) and the host tests
#   bench  xseg-bench latency, scale, growth, threads on the GPU (JSON too)
#   frag   min-budget overhead on every shipped trace: xseg, xseg binned,
#          cuMemAlloc (cudaMalloc) and cuMemAllocAsync (cudaMallocAsync)
#   torch  out of memory under xseg in PyTorch (torch_oom.py), then PyTorch
#          training and inference under native, expandable and xseg
#   replay min-budget overhead of every shipped trace replayed through PyTorch
#          (torch_replay.py): native, expandable segments, xseg as pluggable
#          allocator (REPLAY_ALLOCATORS picks; FRAG_TRACES limits the traces)
#   record PyTorch allocation traces (xseg's trace_file) of torch_train.py:
#          RECORD lists name:mode:steps[:layers:width:heads:vocab] entries,
#          each written to $OUT/NAME.trace.gz for the host replay benchmark
#   quick  smaller benchmark runs
# With no argument: tests and bench.  FRAG_TRACES (names, space-separated)
# limits frag to those traces: all of them with all four allocators do not fit
# in one 10-minute call.  FRAG_ONLY (xseg-bench --only) limits the allocators.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
want() { [[ " $* " == *" all "* ]] || [[ " $ARGS " == *" $1 "* ]]; }
ARGS="${*:-tests bench}"
quick=""
TORCH_ARGS=()
[[ " $ARGS " == *" quick "* ]] && quick="--quick"
rc=0
# The traces FRAG_TRACES names, as paths (none: the benchmark's default, all).
trace_paths() { for t in ${FRAG_TRACES:-}; do echo "benchmarks/traces/$t.trace"; done; }
log() { printf '\n### %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

log "machine"
date -u +"%Y-%m-%d %H:%M UTC"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
nproc; uname -r
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null | tee -a "$OUT/gpu.txt"

log "build"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DXSEG_WERROR=ON >"$OUT/cmake.log" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" >>"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
echo "built"

if want tests; then
  log "tests"
  ctest --test-dir build-gpu --output-on-failure -j4 -LE gpu 2>&1 | tail -6 | tee "$OUT/ctest-host.txt"
  ctest --test-dir build-gpu --output-on-failure -V -L gpu 2>&1 | tee "$OUT/ctest-gpu.txt" |
    grep -E "^[0-9]+: (ok|FAIL|skip|  )|checks|tests passed|Passed|Failed|Skipped" || true
  grep -q "100% tests passed" "$OUT/ctest-gpu.txt" || rc=1
fi

if want bench; then
  log "xseg-bench (GPU)"
  ./build-gpu/benchmarks/xseg-bench --backend cuda $quick --json "$OUT/bench-gpu.json" micro 2>&1 |
    tee "$OUT/bench-gpu.txt" || rc=1
fi

if want frag; then
  log "fragmentation (GPU)"
  mapfile -t traces < <(trace_paths)
  only=()
  [[ -n "${FRAG_ONLY:-}" ]] && only=(--only "$FRAG_ONLY")
  ./build-gpu/benchmarks/xseg-bench --backend cuda "${only[@]}" --json "$OUT/frag-gpu.json" frag "${traces[@]}" 2>&1 |
    tee "$OUT/frag-gpu.txt" || rc=1
fi

if want torch; then
  log "PyTorch"
  export XSEG_LIBRARY=$PWD/build-gpu/libxseg.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
  mkdir -p "$OUT/torch"
  python3 test/gpu/torch_oom.py 2>&1 | grep -v "^xseg: out of memory" | tee "$OUT/torch-oom.txt"
  grep -q "^0 failures" "$OUT/torch-oom.txt" || rc=1
  python3 test/gpu/torch_compare.py --out "$OUT/torch" "${TORCH_ARGS[@]}" 2>&1 | tee "$OUT/torch.txt" || rc=1
  grep -h "xseg per steady step" "$OUT"/torch/*.stderr 2>/dev/null
  tar -C "$OUT" -czf "$OUT/torch.tgz" torch && rm -rf "$OUT/torch"  # the tool returns at most 8 files
fi

if want replay; then
  log "trace replay through PyTorch"
  export XSEG_LIBRARY=$PWD/build-gpu/libxseg.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
  mapfile -t traces < <(trace_paths)
  [[ ${#traces[@]} -eq 0 ]] && traces=(benchmarks/traces/*.trace)
  for alloc in ${REPLAY_ALLOCATORS:-xseg expandable native}; do
    timeout "${REPLAY_TIMEOUT:-300}" python3 test/gpu/torch_replay.py --allocator "$alloc" \
      --json "$OUT/replay-$alloc.json" "${traces[@]}" 2>"/tmp/replay-$alloc.err" | tee "$OUT/replay-$alloc.txt" || {
      rc=1; echo "replay $alloc failed:"; grep -v "^xseg: out of memory" "/tmp/replay-$alloc.err" | tail -20; }
  done
fi

if want record; then
  log "record PyTorch traces"
  export XSEG_LIBRARY=$PWD/build-gpu/libxseg.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
  for spec in ${RECORD:-torch_gpt2_train:train:40 torch_gpt2_infer:infer:8}; do
    IFS=: read -r name mode steps layers width heads vocab <<<"$spec"
    margs=(--mode "$mode" --steps "$steps")
    [[ -n "${layers:-}" ]] && margs+=(--layers "$layers" --width "$width" --heads "$heads" --vocab "$vocab")
    rm -f "/tmp/$name.trace"
    python3 test/gpu/torch_train.py --allocator xseg --xseg-conf "trace_file:/tmp/$name.trace" "${margs[@]}" \
      >"/tmp/$name.json" 2>"/tmp/$name.err" || { tail -20 "/tmp/$name.err"; rc=1; continue; }
    printf '%s: %s events, ' "$name" "$(grep -vc '^#' "/tmp/$name.trace")"
    python3 -c 'import json,sys
def walk(d, pre=""):
    for k, v in d.items():
        if isinstance(v, dict): walk(v, pre + k + ".")
        elif "peak" in k and "bytes" in k and v is not None: print("  %s%s = %.1f MiB" % (pre, k, v / 2**20))
        elif "peak" in k and v is not None: print("  %s%s = %s" % (pre, k, v))
walk(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]))' "/tmp/$name.json"
    gzip -c "/tmp/$name.trace" >"$OUT/$name.trace.gz"
  done
fi

tar -C "$OUT" -czf "$OUT/logs.tgz" cmake.log ctest-host.txt 2>/dev/null && rm -f "$OUT/cmake.log" "$OUT/ctest-host.txt"
log "done (rc=$rc)"
exit $rc
