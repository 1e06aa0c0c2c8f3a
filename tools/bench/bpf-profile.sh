#!/usr/bin/env bash
# Where the DNS tracer's tc program spends its time under one load phase of bpf-cost.sh: a
# machine-wide cpu-clock profile (perf, no hardware PMU needed), the kernel functions the program
# calls, and the samples inside the JITed program by offset with the x86 instruction there.
#
#   sudo tools/bench/bpf-profile.sh [BUILD_DIR] [PHASE] [SECONDS]
#
# PHASE is one of bpf-cost.sh's (default dnsperf_10000). Reading the offsets: a sample lands on the
# instruction after the one that stalled (a timer interrupt is taken once that one retires), so a
# load that misses the cache shows up as samples on its successor. Samples taken while interrupts
# are off (the ring buffer's spinlock) are charged to the point where they come back on (a
# `*spin_unlock*`, shared with the rest of the kernel, so not listed). bpftool here is built without libbfd, so the JITed image is read with
# BPF_OBJ_GET_INFO_BY_FD and disassembled with objdump.
set -euo pipefail

BUILD=${1:-build}
PHASE=${2:-dnsperf_10000}
SECS=${3:-12}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
for t in perf objdump bpftool jq python3; do
  command -v "$t" >/dev/null || { echo "missing $t (apt-get install linux-perf binutils bpftool jq)" >&2; exit 2; }
done
OUT=$(mktemp -d /tmp/ngprof.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

PHASES="$PHASE" "$SRC/tools/bench/bpf-cost.sh" "$BUILD" "$SECS" 1 >"$OUT/cost.txt" 2>&1 &
COST=$!
# The topology and driver take a few seconds; profile the middle of the phase.
sleep 4
perf record -q -a -e cpu-clock -F 20000 -o "$OUT/perf.data" -- sleep $((SECS - 4)) 2>/dev/null
id=$(bpftool -j prog show | jq -r '[.[] | select(.name == "ng_tc")][0].id')
python3 - "$id" "$OUT/jited.bin" <<'EOF'
import ctypes, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
SYS_BPF, PROG_GET_FD_BY_ID, OBJ_GET_INFO_BY_FD = 321, 13, 15
attr = ctypes.create_string_buffer(128)
struct.pack_into('<I', attr, 0, int(sys.argv[1]))
fd = libc.syscall(SYS_BPF, PROG_GET_FD_BY_ID, attr, 128)
if fd < 0:
    sys.exit('no ng_tc program: errno %d' % ctypes.get_errno())
image = ctypes.create_string_buffer(1 << 16)
info = ctypes.create_string_buffer(40)  # struct bpf_prog_info up to xlated_prog_insns
struct.pack_into('<I', info, 16, len(image))                # jited_prog_len
struct.pack_into('<Q', info, 24, ctypes.addressof(image))   # jited_prog_insns
attr = ctypes.create_string_buffer(128)
struct.pack_into('<IIQ', attr, 0, fd, len(info), ctypes.addressof(info))
if libc.syscall(SYS_BPF, OBJ_GET_INFO_BY_FD, attr, 128) < 0:
    sys.exit('prog info: errno %d' % ctypes.get_errno())
n, = struct.unpack_from('<I', info, 16)
open(sys.argv[2], 'wb').write(image.raw[:n])
EOF
wait "$COST"
grep '"phase"' "$OUT/cost.txt"
objdump -D -b binary -mi386:x86-64 "$OUT/jited.bin" | awk -F'\t' '/^ +[0-9a-f]+:/ {
  sub(/^ +/, "", $1); sub(/:$/, "", $1); print $1 "\t" $3 }' >"$OUT/asm.txt"

perf script -i "$OUT/perf.data" -F ip,sym,symoff 2>/dev/null >"$OUT/samples.txt"
echo "# samples in the program and the kernel code it calls"
awk '{print $2}' "$OUT/samples.txt" | sed 's/+0x[0-9a-f]*$//' |
  grep -E '_ng_tc$|ng_question_need|ng_parse_general|ng_count|ng_tcp_split_fix|ringbuf|bpf_ktime|ktime_get_mono_fast_ns|cls_bpf' |
  sort | uniq -c | sort -rn
echo "# samples inside ng_tc by offset (the instruction there; the stalled one is just before it)"
grep -o '_ng_tc+0x[0-9a-f]*' "$OUT/samples.txt" | sed 's/.*+0x//' | sort | uniq -c | sort -rn |
  head -20 | while read -r count off; do
    prev=$(awk -F'\t' -v o="$off" '$1 == o {print p; exit} {p = $1 ": " $2}' "$OUT/asm.txt")
    here=$(awk -F'\t' -v o="$off" '$1 == o {print $2; exit}' "$OUT/asm.txt")
    printf '%5d  %5s  %-36s  after  %s\n' "$count" "$off" "$here" "$prev"
  done
