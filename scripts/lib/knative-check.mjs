// Validates Knative Serving v1 Service manifests against Knative's schema, as the
// @kubernetes-models/knative package ships it (JSON schemas generated from Knative Serving's
// Go API types, knative.dev/serving/pkg/apis/serving/v1, with Kubernetes' core types):
//   node scripts/lib/knative-check.mjs FILE [--expect-invalid]
// Exits 0 when the file is a valid Service (or, with --expect-invalid, when it is not: the
// check proving it can fail). The schemas check types, required fields and enums; like
// Knative's CRD they let unknown fields through, which the end-to-end tests check instead.
import { readFileSync } from "node:fs";
import { parse } from "yaml";
import { Service } from "@kubernetes-models/knative/serving.knative.dev/v1/Service";

const [file, flag] = process.argv.slice(2);
const doc = parse(readFileSync(file, "utf8"));
let error = null;
if (doc?.apiVersion !== "serving.knative.dev/v1" || doc?.kind !== "Service") {
  error = `not a serving.knative.dev/v1 Service: ${doc?.apiVersion} ${doc?.kind}`;
} else {
  try {
    new Service(doc).validate();
  } catch (e) {
    error = e.message;
  }
}
if (flag === "--expect-invalid") {
  if (!error) {
    console.error(`${file}: accepted, but it is not a valid Knative Service`);
    process.exit(1);
  }
  console.log(`${file}: refused as expected (${error})`);
} else if (error) {
  console.error(`${file}: ${error}`);
  process.exit(1);
} else {
  console.log(`${file}: a valid Knative Serving v1 Service`);
}
