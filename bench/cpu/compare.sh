#!/usr/bin/env bash
# The CPU training-step benchmark (issue 5): milliseconds per step of the
# zoo's mlp (784-512-256-10, Adam 1e-3, batch 128, f32) for Kiln
# (kiln compile --emit=package, run by kiln-bench-step), PyTorch eager and
# JAX jit (bench/cpu/peers.py), in one run, on the same thread count and
# pinned to the same CPUs (taskset). Also Kiln's compile time against
# jax.jit's first compile (lower + compile) of the same step.
#
# Usage: bench/cpu/compare.sh [--threads T] [--steps N] [--warmup W]
#                             [--build DIR] [--data random|fashion-mnist]
#                             [--retries K] [--peers-only]
#   --threads  threads for every contender (default: nproc); all three run
#              on the first T CPUs this script may use.
#   --build    the build directory holding bin/kiln and bin/kiln-bench-step
#              (default: ./build at the repository root).
#   --retries  rerun a peer up to K times (default 3) while other processes
#              used more than 0.1 CPUs during its timed loop (peers.py);
#              Kiln's run gets the same measure of other work, printed.
#   --peers-only  skip Kiln (for a machine without a build).
# Needs scripts/install-peers.sh for PyTorch and JAX. Exits non-zero when a
# tool is missing (after running what it can) or a run fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build
threads=$(nproc)
steps=200
warmup=20
data=random
peers_only=0
retries=3
while [[ $# -gt 0 ]]; do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    --threads=*) threads=${1#*=}; shift ;;
    --steps) steps=$2; shift 2 ;;
    --steps=*) steps=${1#*=}; shift ;;
    --warmup) warmup=$2; shift 2 ;;
    --warmup=*) warmup=${1#*=}; shift ;;
    --build) build=$2; shift 2 ;;
    --build=*) build=${1#*=}; shift ;;
    --data) data=$2; shift 2 ;;
    --data=*) data=${1#*=}; shift ;;
    --retries) retries=$2; shift 2 ;;
    --retries=*) retries=${1#*=}; shift ;;
    --peers-only) peers_only=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in threads steps warmup retries; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "compare.sh: --$v: expected a number, got '${!v}'" >&2; exit 2; }
done
[[ $threads -ge 1 && $steps -ge 1 ]] || { echo "compare.sh: --threads and --steps must be at least 1" >&2; exit 2; }

# The first T CPUs this process may run on; every contender is pinned there.
cpus=$(python3 -c "import os,sys; a=sorted(os.sched_getaffinity(0)); t=int(sys.argv[1])
if t>len(a): sys.exit('compare.sh: --threads %d but only %d CPUs are available (%s)' % (t,len(a),a))
print(','.join(map(str,a[:t])))" "$threads")
command -v taskset >/dev/null || { echo "compare.sh: taskset not found (util-linux)" >&2; exit 2; }
pin=(taskset -c "$cpus")

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
missing=()
failed=0

# --- Kiln: compile the step into a package, then time it. ---
kiln_status=""
kiln_json=""
compile_s=""
if [[ $peers_only == 1 ]]; then
  kiln_status="skipped (--peers-only)"
elif [[ ! -x $build/bin/kiln ]]; then
  kiln_status="missing: $build/bin/kiln"
  missing+=("$build/bin/kiln (build the 'kiln' target)")
elif [[ ! -x $build/bin/kiln-bench-step ]]; then
  kiln_status="missing: $build/bin/kiln-bench-step"
  missing+=("$build/bin/kiln-bench-step (build the 'kiln-bench-step' target)")
else
  "$build/bin/kiln" models mlp -o "$out/mlp.kiln" >/dev/null
  t0=$(date +%s.%N)
  if "${pin[@]}" "$build/bin/kiln" compile "$out/mlp.kiln" --emit=package \
      -o "$out/mlp.kpkg" 2>"$out/compile.err"; then
    t1=$(date +%s.%N)
    compile_s=$(python3 -c "import sys; print('%.3f' % (float(sys.argv[2])-float(sys.argv[1])))" "$t0" "$t1")
    # Runs kiln-bench-step and measures the CPU time the rest of the machine
    # used meanwhile (from /proc/stat), as peers.py does for the peers.
    if python3 - "$out/kiln.others" "${pin[@]}" "$build/bin/kiln-bench-step" "$out/mlp.kpkg" \
        --steps "$steps" --warmup "$warmup" --threads "$threads" \
        >"$out/kiln.out" 2>"$out/kiln.err" <<'EOF'
import os, resource, subprocess, sys, time
def busy():
    v = list(map(int, open("/proc/stat").readline().split()[1:9]))
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
b0, w0 = busy(), time.perf_counter()
rc = subprocess.run(sys.argv[2:]).returncode
wall, b1 = time.perf_counter() - w0, busy()
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write("%.2f" % max(0.0, (b1 - b0 - u.ru_utime - u.ru_stime) / wall))
sys.exit(rc)
EOF
    then
      kiln_json=$(grep '^{' "$out/kiln.out" | tail -n 1 || true)
      [[ -n $kiln_json ]] || { kiln_status="kiln-bench-step printed no JSON line"; failed=1; }
    else
      kiln_status="kiln-bench-step failed"
      echo "compare.sh: kiln-bench-step failed:" >&2; cat "$out/kiln.err" >&2
      failed=1
    fi
  else
    kiln_status="kiln compile failed"
    echo "compare.sh: kiln compile --emit=package failed:" >&2
    grep -v ': remark: ' "$out/compile.err" >&2 || true
    failed=1
  fi
fi

# --- The peers, pinned to the same CPUs. ---
peers_rc=0
"${pin[@]}" python3 "$root/bench/cpu/peers.py" --threads "$threads" --steps "$steps" \
  --warmup "$warmup" --data "$data" --retries "$retries" --json >"$out/peers.out" || peers_rc=$?
grep -v '^{' "$out/peers.out" || true
[[ $peers_rc == 0 ]] || failed=1

echo
echo "CPU cores: $cpus (taskset), threads $threads, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
kiln_others=$(cat "$out/kiln.others" 2>/dev/null || true)
python3 - "$out/peers.out" "$kiln_json" "$kiln_status" "$compile_s" "$kiln_others" <<'EOF'
import json, sys
peers_file, kiln_json, kiln_status, compile_s, kiln_others = sys.argv[1:]
peers = {}
for line in open(peers_file):
    if line.startswith("{"):
        r = json.loads(line)
        peers[r["peer"]] = r
rows = []
if kiln_json:
    k = json.loads(kiln_json)
    rows.append(("kiln", k["min_ms"], k["median_ms"], float(compile_s)))
else:
    rows.append(("kiln", None, None, None))
for name in ("torch", "jax"):
    if name in peers:
        r = peers[name]
        rows.append((name, r["min_ms"], r["median_ms"],
                     None if name == "torch" else r["compile_s"]))
    else:
        rows.append((name, None, None, None))
fmt = lambda v, f: "n/a" if v is None else f % v
others = {"kiln": kiln_others or None}
others.update({k: "%.2f" % r["others_util"] for k, r in peers.items()
               if r.get("others_util") is not None})
print(f"{'':<6} {'min ms/step':>12} {'median ms/step':>15} {'compile s':>20} {'others':>7}")
for name, mn, med, comp in rows:
    if name == "torch":
        c = "none (eager)"
    elif name == "jax":
        c = fmt(comp, "%.3f") + " (jit 1st)"
    else:
        c = fmt(comp, "%.3f")
    line = (f"{name:<6} {fmt(mn, '%.3f'):>12} {fmt(med, '%.3f'):>15} {c:>20} "
            f"{others.get(name) or 'n/a':>7}")
    if name == "kiln" and kiln_status:
        line += f"   [{kiln_status}]"
    print(line)
peer_rows = [r for r in rows[1:] if r[2] is not None]
if rows[0][2] is not None and peer_rows:
    best = min(peer_rows, key=lambda r: r[2])
    ratio = rows[0][2] / best[2]
    ratio_min = rows[0][1] / min(r[1] for r in peer_rows)
    print(f"kiln / faster peer ({best[0]}): {ratio:.3f} (medians), {ratio_min:.3f} (minima); "
          f"target <= 0.6: {'met' if ratio <= 0.6 else 'NOT met'}")
    if "jax" in peers:
        print(f"compile: kiln {rows[0][3]:.3f} s vs jax.jit first compile {peers['jax']['compile_s']:.3f} s")
else:
    print("kiln / faster peer: n/a (target <= 0.6)")
print("others: CPUs other processes kept busy while each was timed (near 0 when clean)")
EOF

if [[ ${#missing[@]} -gt 0 ]]; then
  for m in "${missing[@]}"; do echo "compare.sh: missing $m" >&2; done
  exit 1
fi
exit $failed
