#!/usr/bin/env bash
# CIFAR-10 models, qianka against PyTorch: training images/s (Adam, as
# `qk train cifar10`), inference images/s at batch 64 and single-image latency
# (eval mode, no autograd), and peak RSS, for SimpleCNN and ResNet at 1 and 2
# threads, same machine, same batch, in one run. Each configuration runs in its
# own process (peak RSS is its own); ours and the peer alternate.
#   bench/cifar_vs_torch.sh [build-dir] [scale]     (default build/release, 1)
# scale multiplies the step counts. MODELS="simple_cnn simple_resnet" and
# THREADS="1 2" select the configurations. Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
SCALE=${2:-1}
BIN="$BUILD/bench/simple_cnn_step"
[ -x "$BIN" ] || { echo "build $BIN first (cmake --build $BUILD --target simple_cnn_step)"; exit 1; }
# PyTorch at its best on this machine: its OpenMP OpenBLAS, its own thread count.
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PY=/usr/bin/python3
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

# steps per measurement: model, mode, batch -> count (ResNet is ~25x the work)
steps() {
  local n
  case "$1/$2/$3" in
    simple_cnn/train/*) n=20 ;; simple_cnn/infer/64) n=40 ;; simple_cnn/infer/1) n=200 ;;
    simple_resnet/train/*) n=3 ;; simple_resnet/infer/64) n=4 ;; simple_resnet/infer/1) n=30 ;;
  esac
  echo $(( n * SCALE ))
}

run_one() {  # model mode batch threads
  local s; s=$(steps "$1" "$2" "$3")
  local w=$(( s / 5 > 1 ? s / 5 : 1 ))
  local common=(--model "$1" --mode "$2" --batch "$3" --threads "$4" --steps "$s" --warmup "$w")
  "$BIN" "${common[@]}" --optimizer adam >>"$OUT"
  $PY bench/cifar_torch_peer.py "${common[@]}" --optimizer adam >>"$OUT"
  if [ "$2" = train ]; then
    "$BIN" "${common[@]}" --optimizer adam --amp bf16 >>"$OUT"
    $PY bench/cifar_torch_peer.py "${common[@]}" --optimizer adam --bf16 >>"$OUT"
  fi
}

echo "load before: $(uptime)" >&2
for model in ${MODELS:-simple_cnn simple_resnet}; do
  for th in ${THREADS:-1 2}; do
    run_one "$model" train 64 "$th"
    run_one "$model" infer 64 "$th"
    run_one "$model" infer 1 "$th"
    echo "done $model threads $th: $(uptime)" >&2
  done
done
echo "load after: $(uptime)" >&2

$PY - "$OUT" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
res = {}
for r in rows:
    res[(r["model"], r["threads"], r["mode"], r["batch"], r["impl"])] = r
print("| model | threads | measure | qianka | PyTorch f32 | ratio | qianka bf16 | PyTorch bf16 | ratio bf16 | peak RSS MB qianka / PyTorch f32 |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
name = {"simple_cnn": "SimpleCNN", "simple_resnet": "ResNet"}
seen = []
for r in rows:
    k = (r["model"], r["threads"], r["mode"], r["batch"])
    if k in seen:
        continue
    seen.append(k)
    q, t, b, qb = (res.get(k + (i,)) for i in ("qianka", "pytorch", "pytorch-bf16", "qianka-bf16"))
    if not q or not t:
        continue
    if k[2] == "infer" and k[3] == 1:  # latency: ms per image, ratio = torch ms / ours
        what, fq, ft = "batch-1 latency, ms", q["ms_per_step"], t["ms_per_step"]
        ratio = ft / fq
        fmtv = "%.2f"
    else:
        what = ("train img/s (Adam, batch %d)" if k[2] == "train" else "infer img/s (batch %d)") % k[3]
        fq, ft = q["images_per_s"], t["images_per_s"]
        ratio = fq / ft
        fmtv = "%.1f"
    bf = (fmtv % b["images_per_s"]) if b else ""
    qbf = (fmtv % qb["images_per_s"]) if qb else ""
    rbf = ("%.2fx" % (qb["images_per_s"] / b["images_per_s"])) if b and qb else ""
    print("| %s | %d | %s | %s | %s | %.2fx | %s | %s | %s | %.0f / %.0f |" % (
        name[k[0]], k[1], what, fmtv % fq, fmtv % ft, ratio, qbf, bf, rbf, q["peak_rss_mb"], t["peak_rss_mb"]))
print()
print("ratio: qianka speed / PyTorch speed (images/s ratio; for latency PyTorch ms / qianka ms); above 1 means qianka is faster. ratio bf16: qianka bf16 autocast / PyTorch bf16 autocast.")
PYEOF
