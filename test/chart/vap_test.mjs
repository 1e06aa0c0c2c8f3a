// Evaluates the rendered ValidatingAdmissionPolicy's CEL (variables, matchConditions, validations)
// with a CEL engine (@marcbachmann/cel-js from npm; the API server uses cel-go, which no package
// here provides) on admission requests an agent could send, and checks the verdicts.
// Usage: node vap_test.mjs CEL_JS_INDEX RENDER.json
import fs from "node:fs";
import { pathToFileURL } from "node:url";

const [celPath, renderPath] = process.argv.slice(2);
const { evaluate } = await import(pathToFileURL(celPath).href);
const docs = JSON.parse(fs.readFileSync(renderPath, "utf8"));
const policy = docs.find((d) => d.kind === "ValidatingAdmissionPolicy");
if (!policy) {
  console.error("FAIL: no ValidatingAdmissionPolicy in " + renderPath);
  process.exit(1);
}
const spec = policy.spec;

// Returns "skip" (policy does not apply), "allow", or the message of the first failed validation.
function admit(request, object, oldObject) {
  const ctx = { request, object, oldObject, variables: {} };
  for (const c of spec.matchConditions) if (evaluate(c.expression, ctx) !== true) return "skip";
  for (const v of spec.variables) ctx.variables[v.name] = evaluate(v.expression, ctx);
  for (const v of spec.validations) {
    if (evaluate(v.expression, ctx) !== true) return v.message || evaluate(v.messageExpression, ctx);
  }
  return "allow";
}

const SA = "system:serviceaccount:nodegate:nodegate";
const user = (node, name = SA) => ({ username: name, extra: node ? { "authentication.kubernetes.io/node-name": [node] } : {} });
const node = (name) => ({
  metadata: { name, labels: { "kubernetes.io/hostname": name, "nodegate.io/kvm": "true" },
              annotations: { "nodegate.io/owned-labels": "kvm" } },
  spec: { taints: [{ key: "dedicated", value: "vms", effect: "NoSchedule" }] },
  status: { capacity: { cpu: "8" }, allocatable: { cpu: "8" },
            conditions: [{ type: "Ready", status: "True" }, { type: "VirtualizationReady", status: "True" }] },
});
const edit = (name, fn) => { const n = structuredClone(node(name)); fn(n); return n; };
const req = (u) => ({ userInfo: u });

const cases = [
  ["own node: set the gate label", req(user("n1")), edit("n1", (n) => { n.metadata.labels["nodegate.io/vm-ready"] = "true"; }), "allow"],
  ["own node: remove its own label", req(user("n1")), edit("n1", (n) => { delete n.metadata.labels["nodegate.io/kvm"]; }), "allow"],
  ["own node: update its annotation", req(user("n1")), edit("n1", (n) => { n.metadata.annotations["nodegate.io/owned-labels"] = "kvm,tun"; }), "allow"],
  ["own node: add its taint", req(user("n1")), edit("n1", (n) => { n.spec.taints.push({ key: "nodegate.io/not-ready", effect: "NoSchedule" }); }), "allow"],
  ["own node: its condition turns False", req(user("n1")), edit("n1", (n) => { n.status.conditions[1].status = "False"; }), "allow"],
  ["own node: add GuestDNSHealthy", req(user("n1")), edit("n1", (n) => { n.status.conditions.push({ type: "GuestDNSHealthy", status: "True" }); }), "allow"],
  ["another node", req(user("n2")), edit("n1", (n) => { n.metadata.labels["nodegate.io/vm-ready"] = "true"; }), /own node/],
  ["a token without a node", req(user(null)), edit("n1", (n) => { n.metadata.labels["nodegate.io/vm-ready"] = "true"; }), /own node/],
  ["a foreign label", req(user("n1")), edit("n1", (n) => { n.metadata.labels["kubevirt.io/schedulable"] = "true"; }), /labels under nodegate.io/],
  ["remove a foreign label", req(user("n1")), edit("n1", (n) => { delete n.metadata.labels["kubernetes.io/hostname"]; }), /labels under nodegate.io/],
  ["a look-alike prefix", req(user("n1")), edit("n1", (n) => { n.metadata.labels["nodegate.io.evil/x"] = "1"; }), /labels under nodegate.io/],
  ["a foreign annotation", req(user("n1")), edit("n1", (n) => { n.metadata.annotations["x.example.com/y"] = "1"; }), /annotations under/],
  ["remove someone's taint", req(user("n1")), edit("n1", (n) => { n.spec.taints = []; }), /its own taint/],
  ["change the Ready condition", req(user("n1")), edit("n1", (n) => { n.status.conditions[0].status = "False"; }), /its own conditions/],
  ["cordon", req(user("n1")), edit("n1", (n) => { n.spec.unschedulable = true; }), /cordon/],
  ["advertise KVM devices", req(user("n1")), edit("n1", (n) => { n.status.capacity["devices.kubevirt.io/kvm"] = "1000"; }), /capacity/],
  ["another user is not matched", req(user("n2", "system:node:n2")), edit("n1", (n) => { n.spec.unschedulable = true; }), "skip"],
];

let failed = 0;
for (const [name, request, object, want] of cases) {
  let got;
  try {
    got = admit(request, object, node("n1"));
  } catch (e) {
    got = "error: " + e.message;
  }
  const ok = want instanceof RegExp ? want.test(got) && got !== "allow" && got !== "skip" : got === want;
  console.log(`${ok ? "ok  " : "FAIL"} ${name}: ${got}`);
  if (!ok) failed++;
}
process.exit(failed ? 1 : 0);
