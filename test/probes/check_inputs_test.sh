#!/usr/bin/env bash
# Bad input to the real binary: a policy file or a flag with a wrong value is a usage error
# (exit 2) that names the key or flag and the value, for `check` and `agent` alike; a FIFO where
# a file is read, and a probe that never returns, cost `check` its deadline, never a hang.
set -euo pipefail
: "${NODEGATE:?path of the nodegate binary}"
tmp=$(mktemp -d /tmp/nodegate-inputs-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# want_usage_error TEXT CMD...: CMD exits 2 and its stderr contains TEXT.
want_usage_error() {
  local want=$1; shift
  local rc=0
  timeout 20 "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" = 2 ] || fail "$* exited $rc, want 2 ($(cat "$tmp/err"))"
  grep -qF -- "$want" "$tmp/err" || fail "$*: stderr lacks '$want': $(cat "$tmp/err")"
}

# Policy files: each one wrong in one way.
n=0
while IFS='|' read -r json want; do
  n=$((n + 1))
  printf '%s\n' "$json" >"$tmp/bad$n.json"
  want_usage_error "$want" "$NODEGATE" check --config "$tmp/bad$n.json"
  want_usage_error "$want" "$NODEGATE" agent --kube none --listen 127.0.0.1:19260 \
    --debug-listen "" --config "$tmp/bad$n.json"
done <<'EOF'
{"checks":{"lvm":{"data_warn_percent":"eighty"}}}|checks.lvm.data_warn_percent = "eighty": must be a number from 0 to 100
{"checks":{"lvm":{"data_warn_percent":-5}}}|checks.lvm.data_warn_percent = -5
{"checks":{"lvm":{"timeout_seconds":0}}}|checks.lvm.timeout_seconds = 0
{"checks":{"cpu-virt":{"triggers":["sometimes"]}}}|holds "sometimes": entries must be one of timer
{"gate":{"required":["tun"]},"gate":{"required":[]}}|key "gate" is given twice
{"gate":{"required":["kvm-devcie"]}}|gate.required names unknown check "kvm-devcie"
{"checks":{"lvm":{"data_warn":70}}}|unknown key checks.lvm.data_warn
{"checks":{"lvmm":{}}}|unknown check or section checks.lvmm
EOF
echo "config errors: $n files refused by check and agent"

# Numeric and address flags.
for v in nan inf 1e308 1e-9 0 -1 abc; do
  want_usage_error "invalid value \"$v\" for --resync" "$NODEGATE" agent --kube none --resync "$v"
done
for v in 999.1.1.1:9810 127.0.0.1:0 127.0.0.1:65536 127.0.0.1: localhost:9810 '[::1' '[zz]:80' \
  1.2.3:80; do
  want_usage_error "invalid value \"$v\" for --listen" "$NODEGATE" agent --kube none --listen "$v"
done
want_usage_error 'invalid value "300.0.0.1:1" for --debug-listen' "$NODEGATE" agent --kube none \
  --debug-listen 300.0.0.1:1
echo "flag errors refused"

# A FIFO as cpuinfo and as the config: no hang, and cpu-virt is UNKNOWN, not a verdict.
mkdir -p "$tmp/host/proc" "$tmp/host/sys"
mkfifo "$tmp/host/proc/cpuinfo"
rc=0
timeout 20 "$NODEGATE" check --host-root "$tmp/host" --output json >"$tmp/fifo.json" || rc=$?
[ "$rc" != 124 ] || fail "check hung on a FIFO cpuinfo"
[ "$(jq -r '.checks[] | select(.check == "cpu-virt") | .status' "$tmp/fifo.json")" = UNKNOWN ] ||
  fail "cpu-virt on a FIFO cpuinfo: $(jq -c '.checks[0]' "$tmp/fifo.json")"
mkfifo "$tmp/fifo-config.json"
want_usage_error "not a regular file (a FIFO)" "$NODEGATE" check --config "$tmp/fifo-config.json"
echo "FIFOs refused"

# A probe that never returns: lvm is a command that closes its output and sleeps. check has the
# agent's deadline (checks.lvm.timeout_seconds), so it answers UNKNOWN in time.
cat >"$tmp/hang.json" <<'EOF'
{"checks": {"lvm": {"volume_group": "vg0", "timeout_seconds": 1}}}
EOF
start=$(date +%s%N)
rc=0
timeout 30 "$NODEGATE" check --host-root "$tmp/host" --config "$tmp/hang.json" --output json \
  --lvm-command "sh -c 'exec >&- 2>&-; exec sleep 60'" >"$tmp/hang.out" || rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$rc" != 124 ] || fail "check waited for a probe past its deadline"
[ "$ms" -lt 10000 ] || fail "check took $ms ms with a 1 s lvm deadline"
[ "$(jq -r '.checks[] | select(.check == "lvm") | .status' "$tmp/hang.out")" = UNKNOWN ] ||
  fail "a hanging lvm is not UNKNOWN: $(jq -c '.checks[] | select(.check == "lvm")' "$tmp/hang.out")"
echo "hanging probe: UNKNOWN after $ms ms"
echo "1 passed, 0 failed"
