// Offline validation of rendered Kubernetes / KServe manifests.
//
//   node validate.mjs [--alerts alerts.yml] RENDERED.yaml ...
//
// Each file is one `kubectl kustomize` output (a multi-document YAML). Every
// document must be a kind this script knows, and passes:
//  1. the Kubernetes OpenAPI schema as compiled by kubernetes-models (types,
//     required fields, formats) for Kubernetes and Prometheus Operator kinds;
//  2. a TypeScript type check against the same models' interfaces (and
//     types/kserve.ts for KServe), which rejects unknown fields at any depth
//     (the JSON schemas allow them, so a misspelt `livenesProbe` would pass);
//  3. infera's own rules: probes on /health and /ready, a grace period longer
//     than the drain, the HPA's metric served by the adapter rule and
//     exported by infera, the PrometheusRule equal to alerts.yml.
// Prints one line per problem; exits 1 if there is any.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { isDeepStrictEqual } from "node:util";

import ts from "typescript";
import YAML from "yaml";

const HERE = path.dirname(fileURLToPath(import.meta.url));

// apiVersion/kind -> where its model lives. `runtime`: a class with
// validate() (kubernetes-models); `types`: the TypeScript module and name.
function modelOf(apiVersion, kind) {
  const kserve = { "serving.kserve.io/v1alpha1": ["ServingRuntime", "ClusterServingRuntime"],
                   "serving.kserve.io/v1beta1": ["InferenceService"] };
  if (kserve[apiVersion]?.includes(kind)) return { runtime: null, types: ["./types/kserve.js", kind] };
  let pkg;
  if (apiVersion.startsWith("monitoring.coreos.com/")) {
    pkg = `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`;
  } else if (/^([a-z0-9.]+\/)?v[0-9a-z]+$/.test(apiVersion) && !apiVersion.includes("kserve")) {
    pkg = `kubernetes-models/${apiVersion}/${kind}`;
  } else {
    return null;
  }
  const file = path.join(HERE, "node_modules", pkg + ".js");
  if (!fs.existsSync(file)) return null;
  return { runtime: [pkg, kind], types: [pkg, `I${kind}`] };
}

const problems = [];
function problem(where, message) {
  problems.push(`${where}: ${message}`);
}

function argsOf(container) {
  return [...(container.command ?? []), ...(container.args ?? [])];
}

// `--flag=value` or `--flag value` in a container's arguments.
function flagValue(container, flag) {
  const args = argsOf(container);
  for (let i = 0; i < args.length; i++) {
    if (args[i] === flag && i + 1 < args.length) return args[i + 1];
    if (typeof args[i] === "string" && args[i].startsWith(flag + "=")) return args[i].slice(flag.length + 1);
  }
  return undefined;
}

function podSpecOf(doc) {
  if (["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"].includes(doc.kind)) return doc.spec?.template?.spec;
  if (doc.kind === "Pod") return doc.spec;
  return undefined;
}

function isInferaServe(container) {
  const args = argsOf(container);
  return args.includes("serve") || args.some((a) => typeof a === "string" && a.includes("launch.sh"));
}

// infera's rules for pods that run `infera serve` directly.
function checkInferaPod(where, doc) {
  const pod = podSpecOf(doc);
  if (!pod) return;
  for (const c of pod.containers ?? []) {
    if (!argsOf(c).includes("serve")) continue;
    const drain = Number(flagValue(c, "--drain-timeout") ?? 30);
    const pre = c.lifecycle?.preStop?.exec?.command;
    const preSleep = pre && pre[0] === "sleep" ? Number(pre[1]) : 0;
    const grace = pod.terminationGracePeriodSeconds ?? 30;
    if (!(grace > drain + preSleep)) {
      problem(where, `terminationGracePeriodSeconds ${grace} must exceed the preStop sleep (${preSleep} s) plus ` +
                     `--drain-timeout (${drain} s): requests in flight would be killed`);
    }
    const path = (probe) => probe?.httpGet?.path;
    if (path(c.livenessProbe) !== "/health") problem(where, `container ${c.name}: livenessProbe must GET /health`);
    if (path(c.readinessProbe) !== "/ready") problem(where, `container ${c.name}: readinessProbe must GET /ready`);
    if (c.startupProbe && path(c.startupProbe) !== "/health") {
      problem(where, `container ${c.name}: startupProbe must GET /health`);
    }
  }
}

function serverMetricNames() {
  const src = fs.readFileSync(path.join(HERE, "..", "..", "..", "src", "server", "server_metrics.cc"), "utf8");
  return new Set([...src.matchAll(/Add(?:Gauge|Counter|Histogram)\("([a-z_]+)"/g)].map((m) => m[1]));
}

function checkCrossDocument(file, docs, alerts) {
  const adapterMetrics = new Set();
  for (const d of docs) {
    if (d.kind !== "ConfigMap" || !d.data?.["config.yaml"]?.includes("seriesQuery")) continue;
    const cfg = YAML.parse(d.data["config.yaml"]);
    for (const rule of cfg.rules ?? []) {
      for (const key of ["seriesQuery", "metricsQuery", "resources", "name"]) {
        if (!(key in rule)) problem(`${file}: ConfigMap/${d.metadata.name}`, `adapter rule without ${key}`);
      }
      if (rule.name?.as) adapterMetrics.add(rule.name.as);
    }
  }
  const exported = serverMetricNames();
  for (const d of docs) {
    if (d.kind !== "HorizontalPodAutoscaler") continue;
    for (const m of d.spec?.metrics ?? []) {
      const name = m.pods?.metric?.name ?? m.object?.metric?.name ?? m.external?.metric?.name;
      if (!name) continue;
      const where = `${file}: HorizontalPodAutoscaler/${d.metadata.name}`;
      if (!adapterMetrics.has(name)) problem(where, `metric ${name} is not served by any prometheus-adapter rule here`);
      if (!exported.has(name)) problem(where, `metric ${name} is not one infera exports`);
    }
    const target = d.spec?.scaleTargetRef;
    if (!docs.some((x) => x.kind === target?.kind && x.metadata?.name === target?.name)) {
      problem(`${file}: HorizontalPodAutoscaler/${d.metadata.name}`, `scaleTargetRef ${target?.kind}/${target?.name} is not here`);
    }
  }
  for (const d of docs) {
    if (d.kind !== "PrometheusRule" || !alerts) continue;
    if (!isDeepStrictEqual(d.spec?.groups, alerts.groups)) {
      problem(`${file}: PrometheusRule/${d.metadata.name}`,
              "groups differ from deploy/prometheus/alerts.yml (run deploy/kubernetes/gen_prometheusrule.py)");
    }
  }
  for (const d of docs) {
    if (d.kind !== "Service") continue;
    const sel = d.spec?.selector;
    if (!sel) continue;
    const matches = docs.some((w) => {
      const labels = w.spec?.template?.metadata?.labels;
      if (!labels) return false;
      return Object.entries(sel).every(([k, v]) => labels[k] === v || k === "statefulset.kubernetes.io/pod-name");
    });
    if (!matches) problem(`${file}: Service/${d.metadata.name}`, "its selector matches no pod template here");
  }
}

async function main() {
  const argv = process.argv.slice(2);
  let alerts = null;
  const files = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--alerts") alerts = YAML.parse(fs.readFileSync(argv[++i], "utf8"));
    else files.push(argv[i]);
  }
  if (files.length === 0) {
    console.error("usage: node validate.mjs [--alerts alerts.yml] RENDERED.yaml ...");
    process.exit(2);
  }
  // The TypeScript program: one constant per document, typed by its model.
  let source = "";
  const imports = new Map();
  const spans = [];  // [startLine, endLine, where]
  let line = 0;
  let body = "";
  for (const file of files) {
    const docs = [];
    for (const d of YAML.parseAllDocuments(fs.readFileSync(file, "utf8"))) {
      if (d.errors.length) {
        problem(file, `YAML: ${d.errors[0].message}`);
        continue;
      }
      const obj = d.toJS();
      if (obj !== null && obj !== undefined) docs.push(obj);
    }
    for (const [i, doc] of docs.entries()) {
      const where = `${path.basename(file)}: ${doc.kind ?? "?"}/${doc.metadata?.name ?? "?"} (document ${i + 1})`;
      const model = modelOf(doc.apiVersion ?? "", doc.kind ?? "");
      if (!model) {
        problem(where, `unknown apiVersion/kind ${doc.apiVersion}/${doc.kind}`);
        continue;
      }
      if (model.runtime) {
        const mod = await import(model.runtime[0]);
        try {
          new mod[model.runtime[1]](doc).validate();
        } catch (e) {
          problem(where, `schema: ${e.message}`);
        }
      }
      const [module, name] = model.types;
      if (!imports.has(`${module}#${name}`)) imports.set(`${module}#${name}`, `T${imports.size}`);
      const text = `export const d${spans.length}: ${imports.get(`${module}#${name}`)} = ${JSON.stringify(doc, null, 1)};\n`;
      const lines = text.split("\n").length - 1;
      spans.push([line, line + lines, where]);
      line += lines;
      body += text;
      checkInferaPod(where, doc);
    }
    checkCrossDocument(path.basename(file), docs, alerts);
  }
  for (const [key, alias] of imports) {
    const [module, name] = key.split("#");
    source += `import type { ${name} as ${alias} } from "${module}";\n`;
  }
  const offset = imports.size;
  const dir = fs.mkdtempSync(path.join(HERE, ".check-"));
  try {
    const file = path.join(dir, "manifests.ts");
    fs.writeFileSync(file, source.replaceAll('"./types/', '"../types/') + body);
    const program = ts.createProgram([file], {
      strict: true, noEmit: true, skipLibCheck: true, types: [],
      module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext,
      target: ts.ScriptTarget.ES2022,
    });
    for (const diag of ts.getPreEmitDiagnostics(program)) {
      const message = ts.flattenDiagnosticMessageText(diag.messageText, " ");
      if (!diag.file || diag.file.fileName !== file) {
        problem("type check", message);
        continue;
      }
      const { line: l } = diag.file.getLineAndCharacterOfPosition(diag.start ?? 0);
      const span = spans.find(([a, b]) => l - offset >= a && l - offset < b);
      // The offending field: the property name at the diagnostic.
      const at = diag.file.text.slice(diag.start, (diag.start ?? 0) + (diag.length ?? 0));
      problem(span ? span[2] : "type check", `${at}: ${message}`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  for (const p of problems) console.log(p);
  if (problems.length) process.exit(1);
  console.log(`ok: ${spans.length} documents in ${files.length} file(s)`);
}

await main();
