#!/usr/bin/env bash
# Process lifecycle of `nodegate agent --kube none`: SIGHUP reloads --config (a bad file keeps
# the old policy), SIGTERM and SIGINT stop it within a second, a taken port is a clear error.
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d /tmp/nodegate-agent-sig.XXXXXX)
on_exit "rm -rf $work"
echo '{"gate": {"required": []}}' >"$work/config.json"
# An empty host tree: cpu-virt is UNKNOWN there on any machine, so requiring it closes the gate.
mkdir -p "$work/host"
start_agent "$work/agent.log" --kube none --listen 127.0.0.1:19250 --debug-listen 127.0.0.1:19251 \
  --config "$work/config.json" --resync 3600 --host-root "$work/host"
gate() { curl -sf http://127.0.0.1:19251/api/v1/checks | jq -r .gate.open; }
[ "$(gate)" = true ] || fail "empty required list should open the gate"
grep -q "kube none: would set node labels" "$work/agent.log" || fail "kube none does not log its patch"

# A policy typo is refused and the old policy kept (it used to be taken and close the gate).
echo '{"gate": {"required": ["no-such-check"]}}' >"$work/config.json"
kill -HUP "$AGENT_PID"
wait_until 5 grep -q 'names unknown check.*no-such-check' "$work/agent.log" ||
  fail "unknown check in gate.required not reported"
[ "$(gate)" = true ] || fail "an unknown check changed the policy"
echo '{"gate": {"required": ["cpu-virt"]}}' >"$work/config.json"
kill -HUP "$AGENT_PID"
closed() { [ "$(gate)" = false ]; }
wait_until 5 closed || fail "SIGHUP did not apply the new config"
echo '{"gate": ' >"$work/config.json"
kill -HUP "$AGENT_PID"
wait_until 5 grep -q "failed to reload config" "$work/agent.log" || fail "bad config not reported"
kill -0 "$AGENT_PID" || fail "agent died on a bad config"
[ "$(gate)" = false ] || fail "bad config changed the policy"
echo "SIGHUP reload ok"

# The config path turned into a FIFO: the reload is refused at once (it used to block the
# signal thread until a writer appeared, and SIGTERM with it).
rm -f "$work/config.json"
mkfifo "$work/config.json"
kill -HUP "$AGENT_PID"
wait_until 5 grep -q "not a regular file (a FIFO)" "$work/agent.log" || fail "FIFO config not reported"
[ "$(gate)" = false ] || fail "a FIFO config changed the policy"
rm -f "$work/config.json"
echo '{"gate": {"required": ["cpu-virt"]}}' >"$work/config.json"
echo "FIFO config refused"

# Port already taken: exit 1 with a message naming the address.
if "$NODEGATE" agent --kube none --listen 127.0.0.1:19250 --debug-listen "" >"$work/clash.log" 2>&1; then
  fail "second agent on a taken port did not fail"
fi
grep -q "failed to listen on 127.0.0.1:19250" "$work/clash.log" || { cat "$work/clash.log" >&2; fail "no clear error for a taken port"; }

for sig in TERM INT; do
  t0=$(date +%s%N)
  kill -"$sig" "$AGENT_PID"
  wait "$AGENT_PID" && rc=0 || rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "SIG$sig: exit $rc after ${ms} ms"
  [ "$rc" = 0 ] || fail "agent exited $rc on SIG$sig"
  [ "$ms" -lt 1000 ] || fail "SIG$sig took ${ms} ms (limit 1 s)"
  [ "$sig" = INT ] && break
  start_agent "$work/agent.log" --kube none --listen 127.0.0.1:19250 --debug-listen 127.0.0.1:19251 --resync 3600
done
