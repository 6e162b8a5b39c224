#!/usr/bin/env bash
# test/gpu/overhead.sh: device memory a replay process uses beside xseg's
# handles: its used memory as nvidia-smi reports it (polled every 50 ms)
# against xseg's held peak, for traces under a cap (max_memory_mb) and without.
cd "$(dirname "$0")/../.."
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build-gpu -j"$(nproc)" --target xseg-bench >/dev/null || exit 1
B=./build-gpu/benchmarks/xseg-bench
rep=$(mktemp)
trap 'rm -f "$rep"' EXIT
# Caps of 1.02 times each trace's peak (grow_then_split, which needs more, 1.03), then no cap (0).
for spec in grow_then_split:5024 logrand:4759 llm_serving:7558 mixed_streams:7753 torch_gpt2_infer:813 torch_gpt2s_infer:795 grow_then_split:0 logrand:0; do
  t=${spec%%:*}; mb=${spec##*:}
  conf=(); ((mb)) && conf=(--conf "max_memory_mb:$mb")
  $B --backend cuda "${conf[@]}" replay benchmarks/traces/$t.trace > "$rep" 2>&1 &
  pid=$!
  max=0; first=0
  while kill -0 $pid 2>/dev/null; do
    u=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | awk -F', ' -v p=$pid '$1==p{print $2}')
    if [[ -n "$u" ]]; then ((first == 0)) && first=$u; ((u > max)) && max=$u; fi
    sleep 0.05
  done
  held=$(grep -o '"held_bytes":{"current":[0-9]*,"peak":[0-9]*' "$rep" | sed 's/.*"peak"://')
  maps=$(grep -o '"num_map":[0-9]*' "$rep" | sed 's/.*://')
  live=$(grep -o '"handles_live":{"current":[0-9]*,"peak":[0-9]*' "$rep" | sed 's/.*"peak"://')
  printf '%-18s cap %5s MiB | process first %5s MiB max %6s MiB | xseg held peak %6d MiB | handles live peak %5s, maps %6s\n' \
    "$t" "$mb" "$first" "$max" $((held / 1048576)) "$live" "$maps"
done
