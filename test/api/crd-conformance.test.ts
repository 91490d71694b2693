// Checks our generated CRDs against the ones OCM publishes in open-cluster-management.io/api, fetched with
// the Go toolchain at test time (never copied into this repo).
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse } from "yaml";
import { beforeAll, describe, expect, it } from "vitest";
import { crds as served, unconvertible } from "../../shared/api/crds.ts";
import { appliedRecord, manifestStatuses } from "../../functions/work-applier/status.ts";
import { inventoryApiModuleDir, managedServiceAccountModuleDir } from "../../dev/control-plane/binaries.ts";

const ocmApiModule = "open-cluster-management.io/api@v1.3.0";

// OCM's kinds among those this project serves; our own groups (config.ocm-functions.io) are not OCM's,
// and its managed-serviceaccount add-on's API is in that add-on's module (checked below).
const crds = served.filter((c) => c.spec.group.endsWith(".open-cluster-management.io") && c.spec.group !== "authentication.open-cluster-management.io");

// The kinds this project must serve exactly as OCM does.
const requiredKinds = [
  "ManagedCluster",
  "ClusterClaim",
  "ManagedClusterSet",
  "ManagedClusterSetBinding",
  "Placement",
  "PlacementDecision",
  "ClusterManagementAddOn",
  "ManagedClusterAddOn",
  "AddOnDeploymentConfig",
  "AddOnTemplate",
  "ManifestWork",
  "AppliedManifestWork",
];

type Node = { [key: string]: unknown };
type Crd = {
  spec: {
    group: string;
    scope: string;
    names: Node;
    versions: { name: string; served: boolean; storage: boolean; subresources?: Node; additionalPrinterColumns?: Node[]; schema: { openAPIV3Schema: Node } }[];
  };
};

function downloadOcmApi(): string {
  const dir = mkdtempSync(join(tmpdir(), "ocm-api-"));
  try {
    const out = execFileSync("go", ["mod", "download", "-json", ocmApiModule], {
      cwd: dir,
      env: { ...process.env, GOFLAGS: "-mod=mod", GOTOOLCHAIN: "local" },
      encoding: "utf8",
    });
    return (JSON.parse(out) as { Dir: string }).Dir;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// OCM ships some CRDs twice (addon/v1alpha1 has the alpha-only file, addon/v1beta1 the full one); the file
// with the most versions is the one its operator installs.
function readOcmCrds(dir: string): Map<string, Crd> {
  const byKind = new Map<string, Crd>();
  const files = readdirSync(dir, { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith(".crd.yaml"));
  for (const file of files) {
    const crd = parse(readFileSync(join(dir, file), "utf8")) as Crd;
    const kind = crd.spec.names["kind"] as string;
    const seen = byKind.get(kind);
    if (!seen || seen.spec.versions.length < crd.spec.versions.length) byKind.set(kind, crd);
  }
  return byKind;
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
const sorted = (a: unknown) => (Array.isArray(a) ? [...a].sort() : a);

export function compareCrds(ocm: Crd, ours: Crd): string[] {
  const kind = ocm.spec.names["kind"] as string;
  const problems: string[] = [];
  const report = (path: string, what: string, theirs: unknown, mine: unknown) =>
    problems.push(`${kind}${path}: ${what} is ${JSON.stringify(mine)}, OCM has ${JSON.stringify(theirs)}`);
  if (ocm.spec.group !== ours.spec.group) report("", "group", ocm.spec.group, ours.spec.group);
  if (ocm.spec.scope !== ours.spec.scope) report("", "scope", ocm.spec.scope, ours.spec.scope);
  for (const name of ["kind", "plural", "singular", "listKind", "shortNames", "categories"])
    if (!same(ocm.spec.names[name], ours.spec.names[name]))
      report("", `names.${name}`, ocm.spec.names[name], ours.spec.names[name]);
  const versionNames = (c: Crd) => c.spec.versions.map((v) => v.name);
  if (!same(versionNames(ocm), versionNames(ours))) report("", "versions", versionNames(ocm), versionNames(ours));
  for (const theirs of ocm.spec.versions) {
    const mine = ours.spec.versions.find((v) => v.name === theirs.name);
    if (!mine) continue;
    const at = `/${theirs.name}`;
    for (const flag of ["served", "storage"] as const)
      if (theirs[flag] !== mine[flag]) report(at, flag, theirs[flag], mine[flag]);
    if (!same(theirs.subresources ?? {}, mine.subresources ?? {}))
      report(at, "subresources", theirs.subresources, mine.subresources);
    const columns = (v: typeof theirs) =>
      (v.additionalPrinterColumns ?? []).map((c) => ({ name: c["name"], type: c["type"], jsonPath: c["jsonPath"] }));
    if (!same(columns(theirs), columns(mine))) report(at, "additionalPrinterColumns", columns(theirs), columns(mine));
    problems.push(...compareSchemas(theirs.schema.openAPIV3Schema, mine.schema.openAPIV3Schema, `${kind}${at}`));
  }
  return problems;
}

// Every path in OCM's schema must exist in ours with the same shape-defining keywords.
export function compareSchemas(ocm: Node, ours: Node | undefined, path: string): string[] {
  if (!ours) return [`${path}: missing`];
  const problems: string[] = [];
  const keywords: [string, (v: unknown) => unknown][] = [
    ["type", (v) => v],
    ["enum", (v) => v],
    ["required", sorted],
    ["format", (v) => v],
    ["x-kubernetes-preserve-unknown-fields", (v) => v === true],
    ["x-kubernetes-int-or-string", (v) => v === true],
  ];
  for (const [key, norm] of keywords)
    if (!same(norm(ocm[key]), norm(ours[key])))
      problems.push(`${path}: ${key} is ${JSON.stringify(ours[key])}, OCM has ${JSON.stringify(ocm[key])}`);
  const theirProps = (ocm["properties"] ?? {}) as Record<string, Node>;
  const ourProps = (ours["properties"] ?? {}) as Record<string, Node>;
  for (const [name, child] of Object.entries(theirProps))
    problems.push(...compareSchemas(child, ourProps[name], `${path}.${name}`));
  if (ocm["items"]) problems.push(...compareSchemas(ocm["items"] as Node, ours["items"] as Node | undefined, `${path}[]`));
  if (typeof ocm["additionalProperties"] === "object")
    problems.push(
      ...compareSchemas(ocm["additionalProperties"] as Node, ours["additionalProperties"] as Node | undefined, `${path}{}`),
    );
  return problems;
}

// The JSON keys a Go struct in OCM's types always writes (no omitempty), and every key it may write;
// embedded `json:",inline"` structs contribute theirs.
type GoJsonKeys = { always: string[]; all: string[] };
function goJsonKeys(source: string, struct: string): GoJsonKeys {
  const body = new RegExp(`type ${struct} struct \\{([\\s\\S]*?)\\n\\}`).exec(source)?.[1];
  if (body === undefined) throw new Error(`struct ${struct} not found`);
  const keys: GoJsonKeys = { always: [], all: [] };
  for (const m of body.matchAll(/^\s*(\w+)(?:\s+[\w.*\[\]]+)?\s+`json:"([^"]*)"/gm)) {
    const [name, ...options] = m[2]!.split(",");
    if (name === "" && options.includes("inline")) {
      const inner = goJsonKeys(source, m[1]!);
      keys.always.push(...inner.always);
      keys.all.push(...inner.all);
      continue;
    }
    keys.all.push(name!);
    if (!options.includes("omitempty")) keys.always.push(name!);
  }
  return keys;
}

describe("CRDs conform to OCM's published open-cluster-management.io/api v1.3.0", () => {
  let ocm: Map<string, Crd>;
  let apiDir: string;
  beforeAll(() => {
    apiDir = downloadOcmApi();
    ocm = readOcmCrds(apiDir);
  });

  // OCM's work agent writes "" for a core group and a cluster-scoped namespace; a status missing them
  // is not what OCM's clients read.
  it("writes work status in the shape OCM's Go types declare: every field without omitempty, nothing else", () => {
    const types = readFileSync(join(apiDir, "work", "v1", "types.go"), "utf8");
    const metas = [
      { ordinal: 0, version: "v1", kind: "ConfigMap", resource: "configmaps", name: "cm", namespace: "demo" },
      { ordinal: 1, version: "v1", kind: "Namespace", resource: "namespaces", name: "demo" },
      { ordinal: 2, group: "apps", version: "v1", kind: "Deployment", resource: "deployments", name: "web", namespace: "demo" },
    ];
    const statuses = manifestStatuses({ outcomes: metas.map((resourceMeta) => ({ resourceMeta, applied: { ok: true }, read: { state: "missing" } })), generation: 1, now: new Date() });
    const manifestMeta = goJsonKeys(types, "ManifestResourceMeta");
    expect(manifestMeta.always).toEqual(expect.arrayContaining(["ordinal", "group", "namespace"]));
    for (const s of statuses) {
      expect(Object.keys(s.resourceMeta).sort()).toEqual(expect.arrayContaining([...manifestMeta.always].sort()));
      expect(Object.keys(s.resourceMeta).filter((k) => !manifestMeta.all.includes(k))).toEqual([]);
    }
    const appliedMeta = goJsonKeys(types, "AppliedManifestResourceMeta");
    expect(appliedMeta.always).toEqual(expect.arrayContaining(["group", "namespace", "version"]));
    for (const m of metas) {
      const record = appliedRecord(m, "uid-1");
      expect(Object.keys(record)).toEqual(expect.arrayContaining(appliedMeta.always));
      expect(Object.keys(record).filter((k) => !appliedMeta.all.includes(k))).toEqual([]);
    }
    // control: a record in the old shape (group and namespace left out) misses keys OCM always writes
    expect(appliedMeta.always.filter((k) => !["version", "resource", "name", "uid"].includes(k))).toEqual(expect.arrayContaining(["group", "namespace"]));
  });

  it("covers every OCM kind this project serves, and OCM publishes each of them", () => {
    const ours = crds.map((c) => c.spec.names.kind).sort();
    expect(ours).toEqual([...requiredKinds].sort());
    expect(requiredKinds.filter((k) => !ocm.has(k))).toEqual([]);
  });

  // OCM serves these through its conversion webhook; without one we declare them unserved (issue 24).
  const unserved = unconvertible.map((u) => `${u.kind}/${u.version}: served is false, OCM has true`);
  const allProblems = () =>
    crds.flatMap((crd) => {
      const theirs = ocm.get(crd.spec.names.kind);
      return theirs ? compareCrds(theirs, crd as unknown as Crd) : [`${crd.spec.names.kind}: not published by OCM`];
    });

  it("matches names, versions, subresources, printer columns and every schema path, but for the versions it cannot convert", () => {
    expect(allProblems().filter((p) => !unserved.includes(p))).toEqual([]);
  });

  it("leaves unserved exactly the add-on versions OCM serves only through its conversion webhook, keeping their schemas", () => {
    expect(unserved).toEqual(["ClusterManagementAddOn/v1beta1: served is false, OCM has true", "ManagedClusterAddOn/v1beta1: served is false, OCM has true"]);
    expect(allProblems().filter((p) => unserved.includes(p))).toEqual(unserved);
  });

  it("reports a removed field and a changed enum by path", () => {
    const managedCluster = crds.find((c) => c.spec.names.kind === "ManagedCluster");
    const broken = structuredClone(managedCluster) as unknown as Crd;
    const spec = (broken.spec.versions[0]!.schema.openAPIV3Schema["properties"] as Record<string, Node>)["spec"]!;
    const specProps = spec["properties"] as Record<string, Node>;
    delete specProps["hubAcceptsClient"];
    ((specProps["taints"]!["items"] as Node)["properties"] as Record<string, Node>)["effect"]!["enum"] = ["NoSelect"];
    const problems = compareCrds(ocm.get("ManagedCluster")!, broken);
    expect(problems).toEqual([
      "ManagedCluster/v1.spec.hubAcceptsClient: missing",
      'ManagedCluster/v1.spec.taints[].effect: enum is ["NoSelect"], OCM has ["NoSelect","PreferNoSelect","NoSelectIfNew"]',
    ]);
  });
});

// Every path of the Cluster Inventory API's schema with the validation keywords a write is refused by,
// beyond those compareSchemas checks: a status we write must pass the API's own CRD, and theirs ours.
function validationProblems(theirs: Node, ours: Node | undefined, path: string): string[] {
  if (!ours) return [`${path}: missing`];
  const problems: string[] = [];
  const rules = (v: unknown) => ((v as { rule: string; message?: string }[] | undefined) ?? []).map((r) => ({ rule: r.rule, message: r.message }));
  // zod writes a regex's "/" as "\/"; both mean "/" to the API server's RE2
  const pattern = (v: unknown) => (typeof v === "string" ? v.replaceAll("\\/", "/") : v);
  for (const key of ["minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum", "default", "minItems", "maxItems", "x-kubernetes-list-type", "x-kubernetes-list-map-keys"])
    if (!same(key === "pattern" ? pattern(theirs[key]) : theirs[key], key === "pattern" ? pattern(ours[key]) : ours[key])) problems.push(`${path}: ${key} is ${JSON.stringify(ours[key])}, the API has ${JSON.stringify(theirs[key])}`);
  if (!same(rules(theirs["x-kubernetes-validations"]), rules(ours["x-kubernetes-validations"])))
    problems.push(`${path}: x-kubernetes-validations are ${JSON.stringify(rules(ours["x-kubernetes-validations"]))}, the API has ${JSON.stringify(rules(theirs["x-kubernetes-validations"]))}`);
  const ourProps = (ours["properties"] ?? {}) as Record<string, Node>;
  for (const [name, child] of Object.entries((theirs["properties"] ?? {}) as Record<string, Node>)) problems.push(...validationProblems(child, ourProps[name], `${path}.${name}`));
  if (theirs["items"]) problems.push(...validationProblems(theirs["items"] as Node, ours["items"] as Node | undefined, `${path}[]`));
  return problems;
}

describe("the Cluster Inventory API's CRDs conform to sigs.k8s.io/cluster-inventory-api's own (the version tools/apis names)", () => {
  const schema = (c: Crd) => c.spec.versions[0]!.schema.openAPIV3Schema;
  const theirs = new Map<string, Crd>();
  const ours = (kind: string) => served.find((c) => c.spec.group === "multicluster.x-k8s.io" && c.spec.names.kind === kind) as unknown as Crd;
  beforeAll(() => {
    const dir = join(inventoryApiModuleDir(), "config", "crd", "bases");
    for (const kind of ["ClusterProfile", "PlacementDecision"]) theirs.set(kind, parse(readFileSync(join(dir, `multicluster.x-k8s.io_${kind.toLowerCase()}s.yaml`), "utf8")) as Crd);
  });

  it.each(["ClusterProfile", "PlacementDecision"])("%s: matches names, versions, subresources, printer columns and every schema path", (kind) => {
    expect(compareCrds(theirs.get(kind)!, ours(kind))).toEqual([]);
  });

  it.each(["ClusterProfile", "PlacementDecision"])("%s: refuses what the API's CRD refuses and merges lists as it does: the same lengths, patterns, CEL rules and list types on every path", (kind) => {
    expect(validationProblems(schema(theirs.get(kind)!), schema(ours(kind)), `${kind}/v1alpha1`)).toEqual([]);
  });

  it("reports a dropped CEL rule, a changed length and a list no longer merged by key, by path", () => {
    const broken = structuredClone(ours("ClusterProfile"));
    const props = (n: Node) => n["properties"] as Record<string, Node>;
    const spec = props(schema(broken))["spec"]!;
    delete props(spec)["clusterManager"]!["x-kubernetes-validations"];
    const status = props(schema(broken))["status"]!;
    props(props(status)["properties"]!["items"] as Node)["value"]!["maxLength"] = 2048;
    delete props(status)["accessProviders"]!["x-kubernetes-list-type"];
    expect(validationProblems(schema(theirs.get("ClusterProfile")!), schema(broken), "P")).toEqual([
      'P.spec.clusterManager: x-kubernetes-validations are [], the API has [{"rule":"self == oldSelf","message":"ClusterManager is immutable"}]',
      'P.status.accessProviders: x-kubernetes-list-type is undefined, the API has "map"',
      "P.status.properties[].value: maxLength is 2048, the API has 1024",
    ]);
  });
});

describe("the ManagedServiceAccount CRD conforms to OCM's managed-serviceaccount add-on's own (the version tools/apis names)", () => {
  let theirs: Crd;
  const ours = served.find((c) => c.spec.group === "authentication.open-cluster-management.io") as unknown as Crd;
  beforeAll(() => {
    theirs = parse(readFileSync(join(managedServiceAccountModuleDir(), "config", "crd", "bases", "authentication.open-cluster-management.io_managedserviceaccounts.yaml"), "utf8")) as Crd;
  });

  it("matches names, versions (v1alpha1 served and deprecated with OCM's warning, v1beta1 stored), subresources and every schema path", () => {
    expect(compareCrds(theirs, ours)).toEqual([]);
    const deprecation = (c: Crd) => c.spec.versions.map((v) => [v.name, (v as Node)["deprecated"] ?? false, (v as Node)["deprecationWarning"] ?? ""]);
    expect(deprecation(ours)).toEqual(deprecation(theirs));
  });

  it("refuses what OCM's CRD refuses: the same lengths, patterns, bounds and list types on every path of both versions", () => {
    for (const [i, v] of theirs.spec.versions.entries()) expect(validationProblems(v.schema.openAPIV3Schema, ours.spec.versions[i]!.schema.openAPIV3Schema, `ManagedServiceAccount/${v.name}`)).toEqual([]);
  });
});
