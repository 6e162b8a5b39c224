#!/usr/bin/env bash
# test/gpu/run.sh: build and run the GPU suite on a machine with an NVIDIA GPU,
# in one call.  Results and logs go to $OUT (default ./gpu-out).
#
#   test/gpu/run.sh [tests] [bench] [frag] [torch] [train] [ab] [passes] [cold] [passes-ab] [torch-ab] [resnet] [first] [dist] [replay] [record] [quick]
#
#   tests  the ctest suite: GPU tests (label gpu) and the host tests
#   bench  xseg-bench latency, scale, growth, threads on the GPU (JSON too)
#   frag   min-budget overhead on every shipped trace: xseg, xseg binned,
#          cuMemAlloc (cudaMalloc) and cuMemAllocAsync (cudaMallocAsync)
#   torch  the package with its PyTorch binding (pip install --no-build-isolation
#          ./python), then: every torch.cuda memory API under PyTorch's allocator
#          and under xseg (torch_api.py, keys compared); an unchanged Hugging Face
#          fine-tune and an OOM back-off script with and without XSEG_ALLOC_CONF
#          (losses compared bit for bit); torch.empty latency, alternating
#   latency torch.empty + drop under both allocators, alternating
#   passes each trace twice, from empty then warm: time per event and driver
#          calls (xseg-bench passes), and through PyTorch under three allocators
#   cold   first passes from empty through PyTorch, many of them: the default
#          allocator and xseg in alternate processes, COLD_ROUNDS rounds (4), each
#          process replaying every trace COLD_REPEAT times (5; torch_passes.py
#          --repeat --settle 1), summed up by benchmarks/cold_summary.py; with
#          BASE_TAR, the build of that archive too (xseg-base), and both builds
#          compared (cold-ab.txt)
#   passes-ab  xseg-bench passes of this tree against BASE_TAR, alternating, AB_ROUNDS rounds (2)
#   tight-ab   each trace replayed once under a cap of TIGHT_FACTOR (1.02) times its peak
#          (grow_then_split, which needs more, 1.03), this tree against BASE_TAR,
#          alternating, AB_ROUNDS rounds: time and driver calls near the limit
#   frag-ab    min-budget overhead of xseg (no other allocator) on every shipped trace,
#          this tree and BASE_TAR, one after the other
#   torch-ab   torch_passes.py under xseg built from this tree and from BASE_TAR
#          (each installed with pip --target into its own folder), alternating,
#          AB_ROUNDS rounds (2; numbered from AB_ROUND0 + 1), plus PyTorch's default allocator and expandable
#          segments in each round
#   conf-ab    one build, two settings: xseg-bench passes and torch_passes.py under
#          XSEG_ALLOC_CONF=CONF_A and CONF_B (both required), alternating, AB_ROUNDS
#          rounds, plus PyTorch's default allocator each round
#   resnet torchvision ResNet-50 with shapes changing every step, three allocators
#   first  GPT-2 training from an empty cache (first_steps.py, FIRST_ARGS passed
#          on): the set-up and each step's time under three allocators,
#          FIRST_ROUNDS rounds (3)
#   train  PyTorch training and inference under native, expandable and xseg
#          (torch_compare.py)
#   ab     the cached-pair latency of this tree against BASE_TAR (a source
#          archive of an earlier commit, carried), built alike, run alternately
#   dist   torchrun DDP and FSDP2 on 2 GPUs (torch_dist.py) under native,
#          expandable segments and xseg: losses compared bit for bit, per-rank
#          NVML peaks, step times, all_reduce bandwidth on each allocator's
#          memory, NCCL_DEBUG lines; skipped with fewer than 2 GPUs
#          (DIST_SMOKE=1: one rank, to check the scripts)
#   replay min-budget overhead of every shipped trace replayed through PyTorch
#          (torch_replay.py): native, expandable segments, xseg as pluggable
#          allocator (REPLAY_ALLOCATORS picks; FRAG_TRACES limits the traces;
#          REPLAY_BUDGET=filler sets the budget by a raw allocation instead of a cap)
#   record PyTorch allocation traces (xseg's trace_file) of torch_train.py:
#          RECORD lists name:mode:steps[:layers:width:heads:vocab[:arch[:batches[:lengths]]]]
#          entries (batches and lengths comma-separated, "-" for the default),
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
# A/B helpers: ab_rounds, ab_order, ab_bench, ab_each, build_ab_benches, trace_peak.
source test/gpu/ab.sh
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
  [[ "${GPU_HOST_TESTS:-1}" == 1 ]] &&  # CI runs them too; GPU_HOST_TESTS=0 spares the lease
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

# The package, built here against this machine's torch (no network: the
# build backend comes from the image, hence --no-build-isolation).
install_python() {
  [[ -n "${PY_INSTALLED:-}" ]] && return 0
  log "pip install ./python"
  python3 -m pip install --no-build-isolation --no-deps --no-index -q ./python >"$OUT/pip.log" 2>&1 ||
    { tail -30 "$OUT/pip.log"; return 1; }
  python3 -c 'import xseg, xseg._torch as t; print("xseg", xseg.version(), "binding for torch", t.TORCH_VERSION)' || return 1
  PY_INSTALLED=1
}
# The package built from BASE_TAR and from this tree, each in a folder of its
# own (/tmp/py-base, /tmp/py-new), for runs that put two builds side by side.
install_ab() {
  [[ -n "${AB_INSTALLED:-}" ]] && return 0
  [[ -n "${BASE_TAR:-}" ]] || { echo "BASE_TAR is not set"; return 1; }
  rm -rf /tmp/base-src /tmp/py-base /tmp/py-new && mkdir -p /tmp/base-src && tar -C /tmp/base-src -xzf "$BASE_TAR" &&
    python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/py-base /tmp/base-src/python \
      >"$OUT/pip-base.log" 2>&1 &&
    python3 -m pip install --no-build-isolation --no-deps --no-index -q --target /tmp/py-new ./python \
      >"$OUT/pip-new.log" 2>&1 || { echo "pip install failed"; tail -20 "$OUT"/pip-*.log; return 1; }
  AB_INSTALLED=1
}
xseg_env() { env -u PYTHONPATH XSEG_ALLOC_CONF="${XSEG_CONF:-}" "$@"; }
native_env() { env -u PYTHONPATH -u XSEG_ALLOC_CONF "$@"; }

if want latency; then
  install_python || rc=1
  log "torch.empty + drop and the c10 interface, ns per pair (alternating, fresh processes, one core)"
  for round in 1 2 3 4 5; do
    native_env taskset -c 3 python3 test/gpu/torch_latency.py | tee -a "$OUT/latency.jsonl"
    xseg_env taskset -c 3 python3 test/gpu/torch_latency.py | tee -a "$OUT/latency.jsonl"
  done
fi

if want torch; then
  install_python || rc=1
  export PYTHONUNBUFFERED=1
  log "torch.cuda memory APIs: PyTorch's allocator, then xseg"
  native_env python3 test/gpu/torch_api.py --json "$OUT/api-native.json" 2>&1 | tee "$OUT/api-native.txt" | grep -v "^ok" || true
  xseg_env python3 test/gpu/torch_api.py --json "$OUT/api-xseg.json" 2>&1 | tee "$OUT/api-xseg.txt" | grep -v "^ok" || true
  grep -q "^0 failures" "$OUT/api-xseg.txt" || rc=1
  python3 - "$OUT/api-native.json" "$OUT/api-xseg.json" <<'PY' || rc=1
import json, sys
n, x = (json.load(open(p)) for p in sys.argv[1:3])
missing, extra = sorted(set(n["keys"]) - set(x["keys"])), sorted(set(x["keys"]) - set(n["keys"]))
print("memory_stats() keys: native %d, xseg %d; missing %s; extra %s" % (len(n["keys"]), len(x["keys"]), missing, extra))
print("allocated over rounded: native %d, xseg %d" % (n.get("allocated_over_rounded", -1), x.get("allocated_over_rounded", -1)))
print("xseg's OOM message:", x.get("oom_message", "")[:300])
sys.exit(1 if missing or extra else 0)
PY
  log "unchanged scripts, with and without XSEG_ALLOC_CONF"
  for script in "hf_finetune.py --steps ${FT_STEPS:-300}" "oom_backoff.py"; do
    name=${script%%.py*}
    native_env python3 test/gpu/$script >"$OUT/$name-native.json" 2>"/tmp/$name-native.err" || { rc=1; tail -5 "/tmp/$name-native.err"; }
    xseg_env python3 test/gpu/$script >"$OUT/$name-xseg.json" 2>"/tmp/$name-xseg.err" || { rc=1; tail -5 "/tmp/$name-xseg.err"; }
    python3 - "$name" "$OUT/$name-native.json" "$OUT/$name-xseg.json" <<'PY' || rc=1
import json, sys
name = sys.argv[1]
n, x = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[2:4])
same = n["losses"] == x["losses"]
show = {k: v for k, v in x.items() if k != "losses"}
print("%s: xseg %s | native %s | losses equal bit for bit: %s (%d)" % (
    name, show, {k: v for k, v in n.items() if k != "losses"}, same, len(x["losses"])))
sys.exit(0 if same or name == "oom_backoff" and n["batch"] != x["batch"] else 1)
PY
  done
  grep -c "GPU reserved memory" /tmp/hf_finetune-xseg.err | sed 's/^/memory_summary tables logged under xseg: /'
fi

if want train; then
  install_python || rc=1
  log "PyTorch training and inference"
  export PYTHONUNBUFFERED=1
  mkdir -p "$OUT/torch"
  env -u PYTHONPATH python3 test/gpu/torch_compare.py --out "$OUT/torch" "${TORCH_ARGS[@]}" 2>&1 | tee "$OUT/torch.txt" || rc=1
  tar -C "$OUT" -czf "$OUT/torch.tgz" torch && rm -rf "$OUT/torch"  # the tool returns at most 8 files
fi

if want torch-ab; then
  log "passes through PyTorch: this tree against ${BASE_TAR:-(no BASE_TAR)}, alternating"
  install_ab || rc=1
  mapfile -t traces < <(trace_paths)
  [[ ${#traces[@]} -eq 0 ]] && traces=(benchmarks/traces/*.trace)
  export PYTHONUNBUFFERED=1
  for round in $(ab_rounds); do
    native_env python3 test/gpu/torch_passes.py --json "$OUT/tab-native-$round.json" "${traces[@]}" || rc=1
    native_env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 test/gpu/torch_passes.py \
      --json "$OUT/tab-expandable-$round.json" "${traces[@]}" || rc=1
    for which in $(ab_order "$round"); do
      env PYTHONPATH=/tmp/py-$which:test/gpu XSEG_ALLOC_CONF="${XSEG_CONF:-}" \
        python3 test/gpu/torch_passes.py --json "$OUT/tab-$which-$round.json" "${traces[@]}" || rc=1
    done
  done
fi
if want conf-ab; then
  conf_a=${CONF_A:?conf-ab needs CONF_A} conf_b=${CONF_B:?conf-ab needs CONF_B}
  log "passes under two settings of one build, alternating: a = $conf_a, b = $conf_b"
  install_python || rc=1
  mapfile -t traces < <(trace_paths)
  [[ ${#traces[@]} -eq 0 ]] && traces=(benchmarks/traces/*.trace)
  export PYTHONUNBUFFERED=1
  for round in $(ab_rounds); do
    native_env python3 test/gpu/torch_passes.py --json "$OUT/cab-native-$round.json" "${traces[@]}" || rc=1
    for which in $(ab_order "$round" | sed 's/base/b/; s/new/a/'); do
      [[ $which == a ]] && conf=$conf_a || conf=$conf_b
      echo "## $which ($conf), round $round"
      ./build-gpu/benchmarks/xseg-bench --backend cuda --conf "$conf" --json "$OUT/cab-c-$which-$round.json" \
        passes "${traces[@]}" 2>&1 | grep -v "^xseg-bench\|^config" || rc=1
      XSEG_CONF=$conf xseg_env python3 test/gpu/torch_passes.py --json "$OUT/cab-$which-$round.json" \
        "${traces[@]}" || rc=1
    done
  done 2>&1 | tee "$OUT/conf-ab.txt"
fi
if want ab; then
  log "cached-pair latency: this tree against ${BASE_TAR:-(no BASE_TAR)}"
  build_ab_benches || rc=1
  for round in 1 2 3; do
    for which in $(ab_order "$round"); do
      bin=$(ab_bench "$which")
      printf '%s %s: ' "$which" "$round"
      $bin --backend cuda latency 2>&1 | grep -E "^ +[0-9]+ " | awk '{printf "%s=%s ", $1, $2} END {print ""}'
    done
  done | tee "$OUT/ab.txt"
fi

if want passes; then
  log "passes: each trace twice, from empty then warm (xseg-bench on the GPU, then through PyTorch)"
  mapfile -t traces < <(trace_paths)
  ./build-gpu/benchmarks/xseg-bench --backend cuda --json "$OUT/passes-c.json" passes "${traces[@]}" 2>&1 | tee "$OUT/passes-c.txt" || rc=1
  install_python || rc=1
  [[ ${#traces[@]} -eq 0 ]] && traces=(benchmarks/traces/*.trace)
  export PYTHONUNBUFFERED=1
  native_env python3 test/gpu/torch_passes.py --json "$OUT/passes-native.json" "${traces[@]}" || rc=1
  native_env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 test/gpu/torch_passes.py --json "$OUT/passes-expandable.json" "${traces[@]}" || rc=1
  xseg_env python3 test/gpu/torch_passes.py --json "$OUT/passes-xseg.json" "${traces[@]}" || rc=1
fi

if want cold; then
  rounds=${COLD_ROUNDS:-4} repeat=${COLD_REPEAT:-5}
  log "first passes from empty, many: PyTorch's default and xseg alternating, $rounds rounds, each trace $repeat times a process"
  install_python || rc=1
  mapfile -t traces < <(trace_paths)
  [[ ${#traces[@]} -eq 0 ]] && traces=(benchmarks/traces/*.trace)
  export PYTHONUNBUFFERED=1
  # With BASE_TAR, the build of BASE_TAR runs too (as xseg-base), each round
  # in the order rotated by one.
  allocs=(native xseg)
  if [[ -n "${BASE_TAR:-}" ]]; then install_ab && allocs+=(xseg-base) || rc=1; fi
  for round in $(seq 1 "$rounds"); do
    n=${#allocs[@]} order=()
    for ((i = 0; i < n; i++)); do order+=("${allocs[(i + round - 1) % n]}"); done
    for which in "${order[@]}"; do
      case $which in
        native) run=(native_env) ;;
        xseg) run=(xseg_env) ;;
        xseg-base) run=(env PYTHONPATH=/tmp/py-base:test/gpu XSEG_ALLOC_CONF="${XSEG_CONF:-}") ;;
      esac
      "${run[@]}" python3 test/gpu/torch_passes.py --settle 1 --repeat "$repeat" --label "$which" \
        --json "$OUT/cold-$which-$round.json" "${traces[@]}" >>"$OUT/cold.log" 2>&1 || { rc=1; tail -5 "$OUT/cold.log"; }
    done
  done
  python3 benchmarks/cold_summary.py "$OUT"/cold-*.json | tee "$OUT/cold.txt" || rc=1
  if [[ " ${allocs[*]} " == *" xseg-base "* ]]; then
    python3 benchmarks/cold_summary.py --base xseg-base --new xseg "$OUT"/cold-*.json | tee "$OUT/cold-ab.txt" || rc=1
    python3 benchmarks/cold_summary.py --new xseg-base "$OUT"/cold-*.json | tee "$OUT/cold-base.txt" || rc=1
  fi
fi

if want passes-ab; then
  log "passes: this tree against ${BASE_TAR:-(no BASE_TAR)}, alternating"
  build_ab_benches || rc=1
  mapfile -t traces < <(trace_paths)
  passes_once() {
    echo "## $which, round $round"
    $bin --backend cuda --json "$OUT/passes-$which-$round.json" passes "${traces[@]}" 2>&1 | grep -v "^xseg-bench\|^config" || rc=1
  }
  ab_each passes_once | tee "$OUT/passes-ab.txt"
fi

if want tight-ab; then
  log "near the limit: each trace under a cap of ${TIGHT_FACTOR:-1.02} x its peak, this tree against ${BASE_TAR:-(no BASE_TAR)}"
  build_ab_benches || rc=1
  mapfile -t traces < <(trace_paths)
  ((${#traces[@]})) || mapfile -t traces < <(ls benchmarks/traces/*.trace)
  tight_once() {
    for t in "${traces[@]}"; do
      name=$(basename "$t" .trace)
      factor=${TIGHT_FACTOR:-1.02}
      [[ $name == grow_then_split ]] && factor=$(python3 -c "print(max($factor, 1.03))")
      peak=$(trace_peak "$t")
      mb=$(python3 -c "print(int($peak * $factor / 2**20) + 1)")
      printf '%-6s round %s %-22s cap %6s MiB: ' "$which" "$round" "$name" "$mb"
      $bin --backend cuda --conf "max_memory_mb:$mb" --json "$OUT/tight-$which-$round-$name.json" replay "$t" 2>&1 |
        grep -E "^replayed|^\| Driver" | sed 's/^replayed [^:]*: //' | tr '\n' ' ' | cut -c1-220
      echo
    done
  }
  ab_each tight_once | tee "$OUT/tight-ab.txt"
fi

if want frag-ab; then
  log "min-budget overhead of xseg, this tree and ${BASE_TAR:-(no BASE_TAR)}"
  build_ab_benches || rc=1
  mapfile -t traces < <(trace_paths)
  for which in new base; do
    "$(ab_bench "$which")" --backend cuda --only xseg --json "$OUT/frag-$which.json" frag "${traces[@]}" 2>&1 |
      tee "$OUT/frag-$which.txt" || rc=1
  done
fi

if want resnet; then
  install_python || rc=1
  log "ResNet-50, shapes changing every step (${RESNET_ROUNDS:-2} rounds, alternating)"
  for round in $(seq "${RESNET_ROUNDS:-2}"); do
    order="native expandable xseg"
    ((round % 2)) || order="xseg expandable native"
    for alloc in $order; do
      case $alloc in
        native) native_env python3 test/gpu/resnet_shapes.py ;;
        expandable) native_env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 test/gpu/resnet_shapes.py ;;
        xseg) xseg_env python3 test/gpu/resnet_shapes.py ;;
      esac | tail -1 | sed "s/^{/{\"round\": $round, /" | tee -a "$OUT/resnet.jsonl" | cut -c1-200
    done
  done
  # Step by step against PyTorch's default in the same round (the same
  # shapes in the same order): the median of the per-step ratios, which
  # the mix of large and small shapes does not move as it moves a median
  # of the step times themselves.
  python3 - "$OUT/resnet.jsonl" <<'PY' || rc=1
import json, statistics as st, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {(r["round"], r["allocator"]): r for r in runs if "round" in r and "steps_ms" in r}
for alloc in ("native-expandable", "xseg"):
    ratios, totals = [], []
    for (rnd, a), r in sorted(by.items()):
        n = by.get((rnd, "native"))
        if a != alloc or not n:
            continue
        ratios.append(st.median(x / y for x, y in zip(r["steps_ms"][5:], n["steps_ms"][5:])))
        totals.append(sum(r["steps_ms"][5:]) / sum(n["steps_ms"][5:]))
    if ratios:
        res = [by[k]["reserved_peak_mib"] for k in sorted(by) if k[1] == alloc]
        print("%s against native, per round: step-by-step median ratio %s (median %.3f); steps 5.. total %s; "
              "reserved peak MiB %s" % (alloc, " ".join("%.3f" % x for x in ratios), st.median(ratios),
                                        " ".join("%.3f" % x for x in totals), " ".join("%.0f" % x for x in res)))
PY
fi

if want first; then
  install_python || rc=1
  log "GPT-2 training from an empty cache: set-up and first steps (${FIRST_ROUNDS:-3} rounds, order rotated)"
  for round in $(seq "${FIRST_ROUNDS:-3}"); do
    case $((round % 3)) in
      1) order="native expandable xseg" ;;
      2) order="expandable xseg native" ;;
      0) order="xseg native expandable" ;;
    esac
    for alloc in $order; do
      case $alloc in
        native) native_env python3 test/gpu/first_steps.py ${FIRST_ARGS:-} ;;
        expandable) native_env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 test/gpu/first_steps.py ${FIRST_ARGS:-} ;;
        xseg) xseg_env python3 test/gpu/first_steps.py ${FIRST_ARGS:-} ;;
      esac 2>>"$OUT/first.err" | tail -1 | sed "s/^{/{\"round\": $round, /" | tee -a "$OUT/first.jsonl" | cut -c1-160 ||
        { echo "first_steps.py under $alloc failed (round $round): $OUT/first.err"; rc=1; }
    done
  done
  # Against PyTorch's default in the same round: the set-up, step 0 (the
  # growth to the peak), step 1, and the median of steps 3 on (repeats).
  python3 - "$OUT/first.jsonl" <<'PY' || rc=1
import json, statistics as st, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {(r["round"], r["allocator"]): r for r in runs}
def parts(r):
    s = r["steps_ms"]
    return r["setup_ms"], s[0], s[1], st.median(s[3:])
for alloc in ("native", "expandable", "xseg"):
    rows = [by[k] for k in sorted(by) if k[1] == alloc]
    if not rows:
        continue
    med = [st.median(p[i] for p in map(parts, rows)) for i in range(4)]
    line = "%-10s set-up %.1f ms, step 0 %.1f, step 1 %.1f, steps 3.. %.1f (medians of %d); reserved peak MiB %s" % (
        alloc, *med, len(rows), " ".join("%.0f" % r["reserved_peak_mib"] for r in rows))
    if alloc != "native":
        ratios = []
        for r in rows:
            n = by.get((r["round"], "native"))
            if n:
                ratios.append([a / b for a, b in zip(parts(r), parts(n))])
        if ratios:
            line += "; over native, median of rounds: set-up %.3f, step 0 %.3f, step 1 %.3f, steps 3.. %.3f" % tuple(
                st.median(x[i] for x in ratios) for i in range(4))
    if all("cpu_ms" in r for r in rows):
        line += "; host queued step 0 in %.1f ms, later steps in %.1f" % (
            st.median(r["cpu_ms"][0] for r in rows), st.median(st.median(r["cpu_ms"][3:]) for r in rows))
    print(line)
    ph = [r["xseg_phases"] for r in rows if r.get("xseg_phases")]
    for i, name in enumerate(("set-up", "step 0", "step 1", "steps 2..")):
        if ph:
            d = {k: st.median(p[i][k] for p in ph) for k in ph[0][i]}
            print("  xseg %-9s driver %.1f ms (paced %.1f): %d creates, %d releases, %d maps, %d unmaps, %d grows, "
                  "%d conversions, %d fence waits" % (name, d["driver_ms"], d["time_paced_ns"] / 1e6,
                  d["num_device_alloc"], d["num_device_free"], d["num_map"], d["num_unmap"], d["num_grows"],
                  d["num_conversions"], d["num_fence_waits"]))
PY
fi

if want dist; then
  install_python || rc=1
  export PYTHONUNBUFFERED=1
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
  ranks=2
  if ((ngpu < 2)); then
    echo "dist: $ngpu GPU(s) here; the DDP and FSDP2 tests need 2: skipped"
    ranks=0
    [[ -n "${DIST_SMOKE:-}" ]] && { ranks=1; echo "dist: DIST_SMOKE: the same runs with one rank (checks the scripts, not NCCL between GPUs)"; }
  fi
  if ((ranks > 0)); then
    log "torchrun, $ranks rank(s): DDP and FSDP2 under native, expandable segments and xseg"
    for mode in ddp fsdp; do
      for alloc in native expandable xseg; do
        envs=(native_env)
        [[ $alloc == expandable ]] && envs=(native_env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
        [[ $alloc == xseg ]] && envs=(xseg_env)
        "${envs[@]}" NCCL_DEBUG=INFO timeout 300 torchrun --standalone --nproc_per_node="$ranks" test/gpu/torch_dist.py \
          --mode "$mode" --steps "${DIST_STEPS:-30}" --allreduce-mib "${DIST_ALLREDUCE_MIB:-256}" \
          >"$OUT/dist-$mode-$alloc.out" 2>"$OUT/dist-$mode-$alloc.log" || { rc=1; tail -15 "$OUT/dist-$mode-$alloc.log"; }
        grep '^{' "$OUT/dist-$mode-$alloc.out" | tail -1 | tee -a "$OUT/dist.jsonl" | cut -c1-160
      done
    done
    log "NCCL on each allocator's memory (NCCL_DEBUG=INFO lines on registration and transports)"
    # NCCL_DEBUG writes to stdout (the .out files); channel numbers folded so that a transport counts once per direction.
    for f in "$OUT"/dist-*-*.out; do
      echo "== $(basename "$f")"
      grep -iE "regist|NVLS|cumem|via P2P|via SHM|via NET|user buffer|ubr" "$f" | sed 's/^[^ ]* [^ ]* //; s/Channel [0-9]*\/[0-9]* :/Channel NN :/' |
        sort | uniq -c | sort -rn | head -12
    done | tee "$OUT/dist-nccl.txt"
    python3 - "$OUT/dist.jsonl" <<'PY' || rc=1
import json, sys
runs = {(r["mode"], r["allocator"]): r for r in map(json.loads, open(sys.argv[1]))}
bad = 0
for mode in ("ddp", "fsdp"):
    n, e, x = (runs.get((mode, a)) for a in ("native", "expandable", "xseg"))
    if not (n and e and x):
        print("%s: a run is missing" % mode); bad = 1; continue
    same = n["losses"] == x["losses"]
    peak = {a: max(r["nvml_peak_mib"] for r in runs[(mode, a)]["ranks"]) for a in ("native", "expandable", "xseg")}
    res = {a: max(r["max_reserved_mib"] for r in runs[(mode, a)]["ranks"]) for a in ("native", "expandable", "xseg")}
    ms = {a: runs[(mode, a)]["step_ms_median"] for a in ("native", "expandable", "xseg")}
    bw = {a: runs[(mode, a)]["allreduce_busbw_gbps"] for a in ("native", "expandable", "xseg")}
    print("%s (%d ranks): losses equal to native bit for bit: %s (%d steps)" % (mode, x["world"], same, len(x["losses"])))
    print("  per-rank peak, NVML (MiB):  " + "  ".join("%s %.0f" % kv for kv in peak.items()))
    print("  max_memory_reserved (MiB):  " + "  ".join("%s %.0f" % kv for kv in res.items()))
    print("  median step (ms):           " + "  ".join("%s %.2f" % kv for kv in ms.items()))
    print("  all_reduce bus GB/s:        " + "  ".join("%s %.1f" % kv for kv in bw.items()))
    if not same or not all(r["allreduce_correct"] for r in (n, e, x)):
        bad = 1
    if x["world"] > 1 and bw["xseg"] < 0.9 * bw["native"]:
        print("  all_reduce on xseg's memory is slower than on PyTorch's: a slower NCCL path"); bad = 1
    if mode == "fsdp" and x["world"] > 1 and peak["xseg"] >= peak["expandable"]:
        print("  FSDP: xseg's per-rank peak is not below expandable segments'")
sys.exit(bad)
PY
  fi
fi

if want replay; then
  log "trace replay through PyTorch"
  install_python || rc=1
  export PYTHONUNBUFFERED=1
  mapfile -t traces < <(trace_paths)
  [[ ${#traces[@]} -eq 0 ]] && traces=(benchmarks/traces/*.trace)
  for alloc in ${REPLAY_ALLOCATORS:-xseg expandable native}; do
    timeout "${REPLAY_TIMEOUT:-300}" env -u PYTHONPATH python3 test/gpu/torch_replay.py --allocator "$alloc" \
      --budget "${REPLAY_BUDGET:-cap}" --json "$OUT/replay-$alloc.json" "${traces[@]}" 2>"/tmp/replay-$alloc.err" |
      tee "$OUT/replay-$alloc.txt" || {
      rc=1; echo "replay $alloc failed:"; grep -v "^xseg: out of memory" "/tmp/replay-$alloc.err" | tail -20; }
  done
fi

if want record; then
  log "record PyTorch traces"
  install_python || rc=1
  export PYTHONUNBUFFERED=1
  for spec in ${RECORD:-torch_gpt2_train:train:40 torch_gpt2_infer:infer:8}; do
    IFS=: read -r name mode steps layers width heads vocab arch batches lengths <<<"$spec"
    margs=(--mode "$mode" --steps "$steps")
    [[ -n "${layers:-}" ]] && margs+=(--layers "$layers" --width "$width" --heads "$heads" --vocab "$vocab")
    [[ -n "${arch:-}" ]] && margs+=(--arch "$arch")
    [[ -n "${batches:-}" && "$batches" != - ]] && margs+=(--batches "$batches")
    [[ -n "${lengths:-}" && "$lengths" != - ]] && margs+=(--lengths "$lengths")
    rm -f "/tmp/$name.trace"
    env -u PYTHONPATH python3 test/gpu/torch_train.py --allocator xseg --xseg-conf "trace_file:/tmp/$name.trace" "${margs[@]}" \
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

# The device tool returns at most 8 files: everything in one archive, all.tgz,
# or all-2.tgz, all-3.tgz... when an earlier run in the same call left one.
archive=all.tgz i=1
while [[ -e "$OUT/$archive" ]]; do archive=all-$((++i)).tgz; done
(cd "$OUT" && tar -czf /tmp/all.tgz --exclude='all.tgz' --exclude='all-*.tgz' . &&
  find . -mindepth 1 ! -name 'all.tgz' ! -name 'all-*.tgz' -delete && mv /tmp/all.tgz "$archive")
log "done (rc=$rc)"
exit $rc
