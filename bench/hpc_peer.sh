#!/usr/bin/env bash
# HPL and HPCG against their peers on this machine, in one run:
#   - qk hpl vs the HPL inside Debian's `hpcc` (HPC Challenge 1.5, Open MPI +
#     OpenBLAS), same hpccinf.txt (N, NB, P x Q, PFACT, ... identical);
#   - both vs the DGEMM ceiling hpcc measures on the same ranks (StarDGEMM);
#   - qk hpcg optimized vs reference path on the same grid and ranks, and vs
#     the bandwidth ceiling: hpcc's STREAM triad x HPCG's flops per byte.
#
#   bench/hpc_peer.sh [build-dir] [N] [NB] [P] [Q] [hpcg-n] [hpcg-seconds] [hpcg-ranks]
#   bench/hpc_peer.sh build/release 12000 192 1 2 64 30 1
# HPCG runs on hpcg-ranks ranks (default 1): the optimized path with one thread
# per rank (qk hpcg's default) and with cores/ranks threads; the reference
# path is serial per rank, as in HPCG.
#
# Installs hpcc with apt-get if it is missing. Prints a markdown table.
set -euo pipefail
BUILD=${1:-build/release}
N=${2:-12000}
NB=${3:-192}
P=${4:-1}
Q=${5:-2}
HN=${6:-64}
HT=${7:-30}
HNP=${8:-1}
NP=$((P * Q))
ROOT=$(cd "$(dirname "$0")/.." && pwd)
QK=$(cd "$ROOT" && realpath "$BUILD/src/cli/qk")
[[ -x $QK ]] || { echo "hpc_peer.sh: $QK not found; build qk first (scripts/build.sh)" >&2; exit 1; }
if ! command -v hpcc >/dev/null; then
  echo "installing the hpcc package (HPC Challenge) ..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y hpcc >/dev/null
fi
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$NP")
export OPENBLAS_NUM_THREADS=$(( $(nproc) / NP > 0 ? $(nproc) / NP : 1 ))
WORK=$(mktemp -d /tmp/qk_hpc_peer.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

# One input file for both: hpcc reads hpccinf.txt, qk hpl reads it as HPL.dat
# (lines after 31 are hpcc's own and ignored).
cat > hpccinf.txt <<DAT
HPLinpack benchmark input file
Innovative Computing Laboratory, University of Tennessee
HPL.out      output file name (if any)
8            device out (6=stdout,7=stderr,file)
1            # of problems sizes (N)
$N           Ns
1            # of NBs
$NB          NBs
0            PMAP process mapping (0=Row-,1=Column-major)
1            # of process grids (P x Q)
$P           Ps
$Q           Qs
16.0         threshold
1            # of panel fact
2            PFACTs (0=left, 1=Crout, 2=Right)
1            # of recursive stopping criterium
4            NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
1            # of recursive panel fact.
1            RFACTs (0=left, 1=Crout, 2=Right)
1            # of broadcast
1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
1            # of lookahead depth
1            DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
##### This line (no. 32) is ignored (it serves as a separator). ######
0                      		Number of additional problem sizes for PTRANS
1200 10000 30000        	values of N
0                       	number of additional blocking sizes for PTRANS
40 9 8 13 13 20 16 32 64       	values of NB
DAT

echo "== qk hpl ($NP ranks, OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS)" >&2
sed 's/^8            device out/6            device out/' hpccinf.txt > HPL.dat
"${MPIRUN[@]}" "$QK" hpl HPL.dat --progress 0 > qk_hpl.txt
QK_LINE=$(grep -E '^W[RC][0-9]' qk_hpl.txt)
QK_GF=$(awk '{print $7}' <<<"$QK_LINE")
QK_T=$(awk '{print $6}' <<<"$QK_LINE")
QK_PASS=$(grep -o -E 'PASSED|FAILED' qk_hpl.txt | head -1)

echo "== hpcc ($NP ranks)" >&2
"${MPIRUN[@]}" hpcc > /dev/null
get() { grep -E "^$1=" hpccoutf.txt | head -1 | cut -d= -f2; }
HPCC_TF=$(get HPL_Tflops)
HPCC_GF=$(awk -v t="$HPCC_TF" 'BEGIN{printf "%.3f", t*1000}')
HPCC_T=$(grep -E '^W[RC][0-9]' hpccoutf.txt | head -1 | awk '{print $6}')
HPCC_PASS=$(grep -o -E 'PASSED|FAILED' hpccoutf.txt | head -1)
STAR_DGEMM=$(get StarDGEMM_Gflops)
STAR_TRIAD=$(get StarSTREAM_Triad)
DGEMM_CEIL=$(awk -v g="$STAR_DGEMM" -v n="$NP" 'BEGIN{printf "%.3f", g*n}')
TRIAD_TOTAL=$(awk -v g="$STAR_TRIAD" -v n="$NP" 'BEGIN{printf "%.3f", g*n}')

echo "== qk hpcg ${HN}^3 per rank, $HNP rank(s), ${HT} s each path" >&2
HMPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$HNP")
"${HMPIRUN[@]}" "$QK" hpcg --nx "$HN" --ny "$HN" --nz "$HN" --rt "$HT" --progress 0 > opt.txt || true
"${HMPIRUN[@]}" "$QK" hpcg --nx "$HN" --ny "$HN" --nz "$HN" --rt "$HT" --progress 0 --reference > ref.txt || true
# The optimized path once more with cores/ranks threads per rank (its threads
# meet once per plane, which a time-shared machine makes expensive).
HTHR=$(( $(nproc) / HNP > 0 ? $(nproc) / HNP : 1 ))
"${HMPIRUN[@]}" "$QK" hpcg --nx "$HN" --ny "$HN" --nz "$HN" --rt "$HT" --progress 0 --threads "$HTHR" > opt1.txt || true
rating() { grep -o 'rating of: [0-9.]*' "$1" | awk '{print $3}'; }
raw() { grep '^GFLOP/s:' "$1" | awk '{print $NF}'; }
traffic() { grep '^Memory traffic:' "$1" | awk '{print $3}'; }
OPT_R=$(rating opt.txt); REF_R=$(rating ref.txt); OPT1_R=$(rating opt1.txt)
OPT_V=$(grep -o -E 'VALID|INVALID' opt.txt | head -1); REF_V=$(grep -o -E 'VALID|INVALID' ref.txt | head -1)
OPT1_V=$(grep -o -E 'VALID|INVALID' opt1.txt | head -1)
# Flops per byte of the HPCG iteration (model), times the triad bandwidth.
CEIL=$(awk -v g="$(raw opt.txt)" -v b="$(traffic opt.txt)" -v t="$TRIAD_TOTAL" \
  'BEGIN{printf "%.3f", t*g/b}')

echo
echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
     "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| HPL N=$N NB=$NB P x Q=${P}x${Q} | Time (s) | Gflops | Check |"
echo "|---|---|---|---|"
echo "| qk hpl | $QK_T | $QK_GF | $QK_PASS |"
echo "| hpcc 1.5 HPL | $HPCC_T | $HPCC_GF | $HPCC_PASS |"
echo "| ratio qk / hpcc | | $(awk -v a="$QK_GF" -v b="$HPCC_GF" 'BEGIN{printf "%.2fx", a/b}') | |"
echo "| DGEMM ceiling (hpcc StarDGEMM x $NP) | | $DGEMM_CEIL | |"
echo "| qk hpl / ceiling | | $(awk -v a="$QK_GF" -v b="$DGEMM_CEIL" 'BEGIN{printf "%.0f%%", 100*a/b}') | |"
echo
echo "| HPCG ${HN}^3 per rank, $HNP rank(s), ${HT} s | Rating GFLOP/s | Valid |"
echo "|---|---|---|"
echo "| qk hpcg (optimized, 1 thread per rank) | $OPT_R | $OPT_V |"
echo "| qk hpcg (optimized, --threads $HTHR) | $OPT1_R | $OPT1_V |"
echo "| qk hpcg --reference | $REF_R | $REF_V |"
echo "| optimized / reference | $(awk -v a="$OPT_R" -v b="$REF_R" 'BEGIN{printf "%.2fx", a/b}') | |"
echo "| optimized --threads $HTHR / reference | $(awk -v a="$OPT1_R" -v b="$REF_R" 'BEGIN{printf "%.2fx", a/b}') | |"
echo "| STREAM triad (hpcc StarSTREAM x $NP) | $TRIAD_TOTAL GB/s | |"
echo "| bandwidth ceiling (triad x flops/byte) | $CEIL | |"
echo "| optimized / ceiling | $(awk -v a="$OPT_R" -v b="$CEIL" 'BEGIN{printf "%.0f%%", 100*a/b}') | |"
