// Validates every object of the rendered chart with kubernetes-models (types and required fields of
// the Kubernetes and prometheus-operator OpenAPI schemas; unknown fields are not reported by it).
// Usage: node validate_models.js NODE_MODULES_DIR RENDER.json...   (each file: a JSON array of objects)
"use strict";
const path = require("path");
const fs = require("fs");

const [modules, ...files] = process.argv.slice(2);
if (!modules || files.length === 0) {
  console.error("usage: node validate_models.js NODE_MODULES_DIR RENDER.json...");
  process.exit(2);
}

function modelFor(apiVersion, kind) {
  const group = apiVersion.includes("/") ? apiVersion : `v1`;
  const pkg = apiVersion.startsWith("monitoring.coreos.com/")
    ? "@kubernetes-models/prometheus-operator"
    : "kubernetes-models";
  const file = path.join(modules, pkg, group, `${kind}.js`);
  if (!fs.existsSync(file)) throw new Error(`no kubernetes-models schema for ${apiVersion} ${kind} (${file})`);
  return require(file)[kind];
}

function check(obj) {
  const Model = modelFor(obj.apiVersion, obj.kind);
  new Model(obj).validate();
}

// A negative control: the validator must reject a malformed DaemonSet, or a pass proves nothing.
try {
  check({ apiVersion: "apps/v1", kind: "DaemonSet", metadata: { name: "x" },
          spec: { selector: {}, template: { spec: { containers: "not-a-list" } } } });
  console.error("FAIL: kubernetes-models accepted a DaemonSet whose containers is a string");
  process.exit(1);
} catch (e) { /* expected */ }

let failed = 0, count = 0;
for (const f of files) {
  for (const obj of JSON.parse(fs.readFileSync(f, "utf8"))) {
    count++;
    const what = `${path.basename(f)}: ${obj.apiVersion} ${obj.kind} ${obj.metadata && obj.metadata.name}`;
    try {
      check(obj);
    } catch (e) {
      failed++;
      console.error(`FAIL ${what}: ${e.message}`);
    }
  }
}
console.log(`kubernetes-models: ${count - failed}/${count} objects valid`);
process.exit(failed ? 1 : 0);
