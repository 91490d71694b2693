// addon-registration against a real hub and spoke (a fleet with one auto-approved cluster), under its own
// spoke identity and the cluster's hub identity, with the hub side played by the real addon-manager and
// addon-csr-approver under theirs (OCM's addon_registration_test): the kubeClient secret and its
// kubeconfig, an install namespace that appears later, custom signers, rotation, the ten-CSR halt, and
// credentials removed with their registration or add-on.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it, expect, beforeAll, afterAll } from "vitest";
import { parse, stringify } from "yaml";
import "reflect-metadata"; // @peculiar/x509 resolves its algorithms through tsyringe, which needs it
import * as x509 from "@peculiar/x509";
import { startFleet, type Fleet } from "../../dev/local/fleet.ts";
import { KubeClient, type KubeObject } from "../../shared/kube/client.ts";
import { applyManifests, createOrUpdate } from "../../shared/apply.ts";
import { CertificateSigningRequestResource, NamespaceResource, SecretResource } from "../../shared/api/kube.ts";
import type { CertificateSigningRequest } from "../../shared/api/certificates.ts";
import { ClusterLabel } from "../../shared/api/cluster.ts";
import { AgentNamespaceDefault, TooManyCsrsMessage } from "../../shared/api/registration.ts";
import {
  AddOnConditionType,
  AddOnGroup,
  AddOnLabel,
  AddOnTemplateResource,
  ClusterManagementAddOnV1alpha1Resource,
  ManagedClusterAddOnV1alpha1Resource,
  type AddOnTemplate,
  type ManagedClusterAddOnV1alpha1,
} from "../../shared/api/addon.ts";
import { AddonManagerNamespaceDefault, addonAgentUser, addonGroups, templateAgentName } from "../../shared/api/addon-strings.ts";
import { findCondition } from "../../shared/conditions.ts";
import { manualClock } from "../../shared/clock.ts";
import { handleEvent, reconcileKey, serve, type Io } from "../../shared/harness.ts";
import { clientWithSecretFiles, secretText, type Secret } from "../../shared/hub-credentials.ts";
import { X509Certificate } from "node:crypto";
import { createCertificateAuthority, isIssuedBy, readCertificate } from "../../shared/pki.ts";
import { enableAddon } from "../../cli/addon.ts";
import fn, { ConfigSchema, type Config } from "../../functions/addon-registration/reconcile.ts";
import { credentialsOf } from "../../functions/addon-registration/registrations.ts";
import manager, * as managerModule from "../../functions/addon-manager/reconcile.ts";
import approver, * as approverModule from "../../functions/addon-csr-approver/reconcile.ts";
import { identityFor, objectEvent, postEvent, startFunctionServer, testIo } from "../support/functions.ts";
import { eventually } from "../support/eventually.ts";
import { joinedThenQuiet } from "../support/fixtures.ts";

// Own timeouts, not the runner's defaults: starting the fleet (control planes, functions, relays) and
// joining take up to a minute or two on a loaded 2-core machine; a test waits up to 30 s for the cluster's
// identity and CSRs on a live fleet.
const FLEET_START_MS = 240_000;
const FLEET_TEST_MS = 90_000;

const C = "cluster1";
const HUB = "hub";
const HELLO = "helloworld";
const DEFAULT_NS = "open-cluster-management-agent-addon";
const CA_SECRET = "test-addon-signer-ca";
const SUBJECT_ALT_NAME = "2.5.29.17"; // the extension's OID
const suffix = () => Math.random().toString(36).slice(2, 7);

let fleet: Fleet;
let hub: KubeClient; // hub admin: enables add-ons, edits status as OCM's own tests do
let spoke: KubeClient; // spoke admin: the test's eyes on the spoke
let fnKubeconfig: string; // addon-registration's spoke identity
let managerIo: Io<managerModule.Config>;
let approverIo: Io<approverModule.Config>;
let caPem: string;

beforeAll(async () => {
  fleet = await startFleet({ spokes: [{ name: C, autoApprove: true }], resyncMs: 60_000 });
  hub = fleet.hub;
  spoke = KubeClient.fromKubeconfig(fleet.clusters.get(C).adminKubeconfig);
  const hubCluster = fleet.clusters.get(HUB);
  fnKubeconfig = await identityFor(fleet.clusters.get(C), fn.spec.name);
  // Joined, and the cluster's identity may already read its add-ons (granted at acceptance). From here
  // the test drives every function itself: the fleet's own get no more events.
  await joinedThenQuiet(fleet, C, agent().io, (asCluster) => asCluster.list(ManagedClusterAddOnV1alpha1Resource, { namespace: C }));

  await applyManifests(hub, readFileSync(join(import.meta.dirname, "..", "..", "manifests", "addons", "helloworld.yaml"), "utf8"));
  managerIo = testIo({ [HUB]: await identityFor(hubCluster, manager.spec.name) }, { hubCluster: HUB });
  approverIo = testIo({ [HUB]: await identityFor(hubCluster, approver.spec.name) }, { hubCluster: HUB });
  // a custom signer's CA, where the addon-csr-approver finds a template's signingCA
  const ca = await createCertificateAuthority("test-addon-signer");
  caPem = ca.certPem;
  await hub.create(SecretResource, { metadata: { name: CA_SECRET, namespace: AddonManagerNamespaceDefault }, type: "kubernetes.io/tls", data: { "tls.crt": b64(ca.certPem), "tls.key": b64(ca.keyPem) } });
  await createOrUpdate(spoke, NamespaceResource, { metadata: { name: DEFAULT_NS } }, []); // the join makes it, as OCM's klusterlet does
  await eventually(() => managerIo.cluster(HUB).list(ManagedClusterAddOnV1alpha1Resource));
  await eventually(() => approverIo.cluster(HUB).get(SecretResource, CA_SECRET, AddonManagerNamespaceDefault));
}, FLEET_START_MS);
afterAll(async () => {
  spoke?.close();
  await fleet?.stop();
});

const b64 = (s: string) => Buffer.from(s).toString("base64");

// The function as the spoke runs it, with a clock of its own.
function agent(o: Partial<Config> = {}) {
  const clock = manualClock();
  const io = testIo({ [C]: fnKubeconfig }, ConfigSchema.parse({ managementCluster: C, clusterName: C, ...o }), clock);
  return { io, clock, reconcile: (addon: string) => reconcileKey(fn.spec, io, { cluster: HUB, namespace: C, name: addon }) };
}

type Registration = { type: "KubeClient" } | { type: "CustomSigner"; signerName: string };

// An AddOnTemplate add-on of the given registrations, enabled on the cluster and through the real
// addon-manager (status.registrations, status.namespace, configReferences), as the hub leaves it.
async function templateAddon(o: { registrations: Registration[]; installNamespace?: string }): Promise<string> {
  const addon = `addon-${suffix()}`;
  await hub.create<AddOnTemplate>(AddOnTemplateResource, {
    metadata: { name: addon },
    spec: {
      addonName: addon,
      agentSpec: { workload: { manifests: [{ apiVersion: "v1", kind: "ConfigMap", metadata: { name: addon, namespace: "default" } }] } },
      registration: o.registrations.map((r) => (r.type === "KubeClient" ? { type: "KubeClient" } : { type: "CustomSigner", customSigner: { signerName: r.signerName, signingCA: { name: CA_SECRET } } })),
    },
  });
  await hub.create(ClusterManagementAddOnV1alpha1Resource, { metadata: { name: addon }, spec: { supportedConfigs: [{ group: AddOnGroup, resource: "addontemplates", defaultConfig: { name: addon } }] } });
  await enableAddon(hub, { addon, clusters: [C], namespace: o.installNamespace });
  await runManager(addon);
  return addon;
}

const runManager = (addon: string) => reconcileKey(manager.spec, managerIo, { cluster: HUB, namespace: C, name: addon });
const readAddon = async (addon: string) => (await hub.get<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, addon, C))!;
const readSecret = (namespace: string, name: string) => spoke.get<Secret>(SecretResource, name, namespace);

async function csrsOf(addon: string): Promise<CertificateSigningRequest[]> {
  const { items } = await hub.list<CertificateSigningRequest>(CertificateSigningRequestResource, { labelSelector: `${ClusterLabel.ClusterName}=${C},${AddOnLabel.AddonName}=${addon}` });
  return items.sort((a, b) => (a.metadata.creationTimestamp ?? "").localeCompare(b.metadata.creationTimestamp ?? "") || a.metadata.name.localeCompare(b.metadata.name));
}

// The hub's addon-csr-approver approves (and signs custom-signer) requests; kube-controller-manager
// signs the kube-apiserver-client ones.
async function approveAndWaitSigned(addon: string): Promise<void> {
  for (const csr of await csrsOf(addon)) if (!csr.status?.certificate) await reconcileKey(approver.spec, approverIo, { cluster: HUB, name: csr.metadata.name });
  await eventually(async () => expect((await csrsOf(addon)).every((c) => c.status?.certificate)).toBe(true));
}

// Enabled, requested, approved and collected: the secret as the add-on's agent would mount it.
async function issued(a: ReturnType<typeof agent>, addon: string, secret: { namespace: string; name: string }): Promise<Secret> {
  await a.reconcile(addon);
  await approveAndWaitSigned(addon);
  await a.reconcile(addon);
  const s = await readSecret(secret.namespace, secret.name);
  expect(s).toBeDefined();
  return s!;
}

const keysOf = (s: Secret | undefined) => Object.keys(s?.data ?? {}).sort();
const rotatedCondition = async (addon: string) => findCondition((await readAddon(addon)).status?.conditions, AddOnConditionType.ClusterCertificateRotated);

describe("what a registration asks for", { timeout: FLEET_TEST_MS }, () => {
  type Reg = NonNullable<NonNullable<ManagedClusterAddOnV1alpha1["status"]>["registrations"]>[number];
  const mca = (registrations: Reg[], o: { namespace?: string; spec?: string } = {}): ManagedClusterAddOnV1alpha1 => ({
    metadata: { name: "a", namespace: "c" },
    spec: o.spec ? { installNamespace: o.spec } : {},
    status: { registrations, ...(o.namespace ? { namespace: o.namespace } : {}) },
  });
  const rows = [
    {
      name: "a kubeClient without a subject gets OCM's defaults: the cluster agent's name in the CN, the add-on's cluster group as O",
      given: mca([{ signerName: "kubernetes.io/kube-apiserver-client" }]),
      then: [{ type: "kubeClient", secretName: "a-hub-kubeconfig", namespace: "open-cluster-management-agent-addon", subject: { commonName: "system:open-cluster-management:cluster:c:addon:a:agent:agent1", organizations: ["system:open-cluster-management:cluster:c:addon:a"], organizationalUnits: [] }, dnsNames: ["a.addon.open-cluster-management.io"] }],
    },
    {
      name: "a custom signer keeps its subject, OUs included, and names its secret after the signer",
      given: mca([{ signerName: "example.com/s1", subject: { user: "u", groups: ["g"], organizationUnit: ["ou"] } }], { namespace: "ns1" }),
      then: [{ type: "customSigner", secretName: "a-example.com-s1-client-cert", namespace: "ns1", subject: { commonName: "u", organizations: ["g"], organizationalUnits: ["ou"] } }],
    },
    {
      name: "a custom signer without groups gets no default O",
      given: mca([{ signerName: "example.com/s1" }], { spec: "from-spec" }),
      then: [{ namespace: "from-spec", subject: { commonName: "system:open-cluster-management:cluster:c:addon:a:agent:agent1", organizations: [], organizationalUnits: [] } }],
    },
    { name: "a registration without a signer asks for nothing", given: mca([{ signerName: "" }]), then: [] },
    {
      name: "two registrations of one signer write one secret: the first wins",
      given: mca([{ signerName: "example.com/s1", subject: { user: "first" } }, { signerName: "example.com/s1", subject: { user: "second" } }]),
      then: [{ subject: expect.objectContaining({ commonName: "first" }) }],
    },
  ];
  it.each(rows)("$name", ({ given, then }) => {
    expect(credentialsOf(given, { clusterName: "c", agentName: "agent1" })).toEqual(then.map((t) => expect.objectContaining(t)));
  });

  it("asks again (a new pending request) when the subject or the install namespace changes", () => {
    const [a] = credentialsOf(mca([{ signerName: "example.com/s1" }]), { clusterName: "c", agentName: "agent1" });
    const [b] = credentialsOf(mca([{ signerName: "example.com/s1", subject: { user: "other" } }]), { clusterName: "c", agentName: "agent1" });
    const [n] = credentialsOf(mca([{ signerName: "example.com/s1" }], { namespace: "elsewhere" }), { clusterName: "c", agentName: "agent1" });
    expect(new Set([a!.pendingName, b!.pendingName, n!.pendingName]).size).toBe(3);
    expect(a!.pendingName).toMatch(/^addon-a-[0-9a-f]{12}-pending-csr$/);
  });
});

describe("kubeClient registrations", { timeout: FLEET_TEST_MS }, () => {
  it("writes <a>-hub-kubeconfig, whose kubeconfig authenticates on the hub as the registration's user", async () => {
    const a = agent();
    expect(await enableAddon(hub, { addon: HELLO, clusters: [C] })).toEqual([{ cluster: C, result: "created" }]);
    await runManager(HELLO);
    const user = addonAgentUser(C, HELLO, templateAgentName(HELLO));
    expect((await readAddon(HELLO)).status?.registrations).toEqual([{ signerName: "kubernetes.io/kube-apiserver-client", subject: { user, groups: addonGroups(C, HELLO) } }]);

    await a.reconcile(HELLO);
    const [csr, ...more] = await csrsOf(HELLO);
    expect(more).toEqual([]);
    expect(csr!.metadata.name).toMatch(new RegExp(`^addon-${C}-${HELLO}-[bcdfghjklmnpqrstvwxz2456789]{5}$`));
    expect(csr!.metadata.labels).toEqual({ [ClusterLabel.ClusterName]: C, [AddOnLabel.AddonName]: HELLO });
    expect(csr!.spec.signerName).toBe("kubernetes.io/kube-apiserver-client");
    expect([...csr!.spec.usages!].sort()).toEqual(["client auth", "digital signature", "key encipherment"]);
    expect(csr!.spec.username).toMatch(new RegExp(`^system:open-cluster-management:${C}:[a-z0-9]+$`)); // the cluster's own identity
    const request = new x509.Pkcs10CertificateRequest(Buffer.from(csr!.spec.request, "base64").toString());
    expect(request.subjectName.getField("CN")).toEqual([user]);
    expect(request.subjectName.getField("O").sort()).toEqual([...addonGroups(C, HELLO)].sort());
    const san = request.extensions.find((e) => e.type === SUBJECT_ALT_NAME)!;
    expect(new x509.SubjectAlternativeNameExtension(san.rawData).names.toJSON()).toEqual([{ type: "dns", value: `${HELLO}.addon.open-cluster-management.io` }]);

    await approveAndWaitSigned(HELLO);
    await a.reconcile(HELLO);
    const secret = (await readSecret(DEFAULT_NS, `${HELLO}-hub-kubeconfig`))!;
    expect(keysOf(secret)).toEqual(["cluster-name", "kubeconfig", "tls.crt", "tls.key"]);
    expect(secretText(secret, "cluster-name")).toBe(C);
    const kubeconfig = parse(secretText(secret, "kubeconfig")!);
    expect(kubeconfig.users).toEqual([{ name: "default-auth", user: { "client-certificate": "tls.crt", "client-key": "tls.key" } }]);
    expect(kubeconfig.contexts[0].context).toMatchObject({ user: "default-auth", namespace: "configuration" });
    expect(kubeconfig.clusters[0].cluster.server).toBe(fleet.clusters.get(HUB).url);
    const asAddon = clientWithSecretFiles(secretText(secret, "kubeconfig")!, secret);
    try {
      const review = await asAddon.request<{ status: { userInfo: { username: string; groups: string[] } } }>("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" });
      expect(review.status.userInfo.username).toBe(user);
      expect(review.status.userInfo.groups).toEqual(expect.arrayContaining(addonGroups(C, HELLO)));
    } finally {
      asAddon.close();
    }
    const addon = await readAddon(HELLO);
    expect(findCondition(addon.status?.conditions, AddOnConditionType.ClusterCertificateRotated)).toMatchObject({
      status: "True",
      reason: "ClientCertificateUpdated",
      message: expect.stringMatching(/^client certificate rotated starting from \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+0000 UTC to \d{4}-/),
    });
    expect(addon.status?.kubeClientDriver).toBe("csr");
    expect((await spoke.list<Secret>(SecretResource, { namespace: AgentNamespaceDefault, labelSelector: `${AddOnLabel.AddonName}=${HELLO}` })).items).toEqual([]); // no pending request left

    // nothing to do until rotation falls due
    const before = [secret.metadata.resourceVersion, addon.metadata.resourceVersion];
    const outcome = await a.reconcile(HELLO);
    const cert = readCertificate(secretText(secret, "tls.crt")!);
    expect("recheckInMs" in outcome && outcome.recheckInMs).toBeGreaterThan(0.74 * (cert.notAfter.getTime() - Date.now()));
    expect([(await readSecret(DEFAULT_NS, `${HELLO}-hub-kubeconfig`))!.metadata.resourceVersion, (await readAddon(HELLO)).metadata.resourceVersion]).toEqual(before);
    expect(await csrsOf(HELLO)).toHaveLength(1);
  });

  it("requests before the install namespace exists and saves the secret once it appears", async () => {
    const a = agent();
    const namespace = `late-${suffix()}`;
    const addon = await templateAddon({ registrations: [{ type: "KubeClient" }], installNamespace: namespace });
    await a.reconcile(addon);
    await approveAndWaitSigned(addon);
    for (let i = 0; i < 2; i++) await a.reconcile(addon);
    expect(await readSecret(namespace, `${addon}-hub-kubeconfig`)).toBeUndefined();
    expect(await csrsOf(addon)).toHaveLength(1);

    const ns = await spoke.create<KubeObject>(NamespaceResource, { apiVersion: "v1", kind: "Namespace", metadata: { name: namespace } });
    expect((await handleEvent(fn.spec, a.io, objectEvent({ cluster: C, object: ns, verb: "add", mode: "ref" }))).statusCode).toBe(204);
    expect(keysOf(await readSecret(namespace, `${addon}-hub-kubeconfig`))).toEqual(["cluster-name", "kubeconfig", "tls.crt", "tls.key"]);
    expect(await csrsOf(addon)).toHaveLength(1);
  });
});

describe("custom signers", { timeout: FLEET_TEST_MS }, () => {
  it("writes <a>-<signer>-client-cert signed by the template's CA", async () => {
    const a = agent();
    const signerName = `example.com/signer-${suffix()}`;
    const addon = await templateAddon({ registrations: [{ type: "CustomSigner", signerName }] });
    const secret = await issued(a, addon, { namespace: DEFAULT_NS, name: `${addon}-example.com-${signerName.split("/")[1]}-client-cert` });
    expect(keysOf(secret)).toEqual(["cluster-name", "tls.crt", "tls.key"]);
    const pem = secretText(secret, "tls.crt")!;
    expect(isIssuedBy(pem, caPem)).toBe(true);
    expect(readCertificate(pem).commonName).toBe(addonAgentUser(C, addon, templateAgentName(addon)));
    expect(new X509Certificate(pem).subjectAltName).toBe(`DNS:${addon}.addon.open-cluster-management.io`); // the request's SAN, kept by the signer
    const [csr] = await csrsOf(addon);
    expect(csr!.spec.signerName).toBe(signerName);
    expect(await rotatedCondition(addon)).toMatchObject({ status: "True", reason: "ClientCertificateUpdated" });
  });

  it("replaces the secret when the registration's subject changes", async () => {
    const a = agent();
    const signerName = `example.com/signer-${suffix()}`;
    const addon = await templateAddon({ registrations: [{ type: "CustomSigner", signerName }] });
    const name = `${addon}-example.com-${signerName.split("/")[1]}-client-cert`;
    const first = await issued(a, addon, { namespace: DEFAULT_NS, name });
    const subject = { user: `someone-${suffix()}`, groups: ["team-a"], organizationUnit: ["unit-1"] };
    // The hub admin changes the template's subject; the addon-manager carries it into status.registrations.
    const template = (await hub.get<AddOnTemplate>(AddOnTemplateResource, addon))!;
    await hub.update(AddOnTemplateResource, { ...template, spec: { ...template.spec, registration: [{ type: "CustomSigner", customSigner: { signerName, signingCA: { name: CA_SECRET }, subject } }] } });
    await runManager(addon);
    expect((await readAddon(addon)).status?.registrations).toEqual([{ signerName, subject }]);
    const second = await issued(a, addon, { namespace: DEFAULT_NS, name });
    expect(secretText(second, "tls.crt")).not.toBe(secretText(first, "tls.crt"));
    const cert = new x509.X509Certificate(secretText(second, "tls.crt")!);
    expect([cert.subjectName.getField("CN"), cert.subjectName.getField("O"), cert.subjectName.getField("OU")]).toEqual([[subject.user], subject.groups, subject.organizationUnit]);
    expect(await csrsOf(addon)).toHaveLength(2);
  });
});

describe("rotation", { timeout: FLEET_TEST_MS }, () => {
  it("requests a new certificate at 85 % of the old one's life, replaces the secret and reports ClusterCertificateRotated", async () => {
    const a = agent({ clientCertExpirationSeconds: 3600 });
    const addon = await templateAddon({ registrations: [{ type: "KubeClient" }] });
    const name = `${addon}-hub-kubeconfig`;
    const first = await issued(a, addon, { namespace: DEFAULT_NS, name });
    const cert = readCertificate(secretText(first, "tls.crt")!);
    const life = cert.notAfter.getTime() - cert.notBefore.getTime();
    expect(life).toBeLessThanOrEqual(3_600_000 + 360_000); // expirationSeconds honoured (the signer backdates 5 min)

    a.clock.set(new Date(cert.notBefore.getTime() + 0.85 * life));
    await a.reconcile(addon);
    expect(await csrsOf(addon)).toHaveLength(2);
    expect(secretText(await readSecret(DEFAULT_NS, name), "tls.crt")).toBe(secretText(first, "tls.crt")); // the old one serves until the new one comes
    await approveAndWaitSigned(addon);
    a.clock.set(new Date()); // the new certificate is as young as the real clock says
    await a.reconcile(addon);
    const rotated = (await readSecret(DEFAULT_NS, name))!;
    expect(secretText(rotated, "tls.crt")).not.toBe(secretText(first, "tls.crt"));
    expect(secretText(rotated, "kubeconfig")).toBe(secretText(first, "kubeconfig"));
    const next = readCertificate(secretText(rotated, "tls.crt")!);
    expect(next.notAfter.getTime()).toBeGreaterThanOrEqual(cert.notAfter.getTime()); // signed by the real clock, perhaps in the same second
    const pad = (n: number) => String(n).padStart(2, "0");
    const goTime = (d: Date) => `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())} +0000 UTC`;
    expect(await rotatedCondition(addon)).toMatchObject({ status: "True", reason: "ClientCertificateUpdated", message: `client certificate rotated starting from ${goTime(next.notBefore)} to ${goTime(next.notAfter)}` });
  });

  it("stops creating CSRs at ten outstanding for the add-on and says so", async () => {
    const a = agent();
    const addon = `halt-${suffix()}`;
    await hub.create<ManagedClusterAddOnV1alpha1>(ManagedClusterAddOnV1alpha1Resource, { metadata: { name: addon, namespace: C }, spec: {} });
    // as OCM's test does: the subject changes faster than anyone approves
    for (let i = 1; i <= 15; i++) {
      await hub.patch(ManagedClusterAddOnV1alpha1Resource, addon, { status: { registrations: [{ signerName: "kubernetes.io/kube-apiserver-client", subject: { user: `test-${i}` } }] } }, { namespace: C, subresource: "status" });
      await a.reconcile(addon);
    }
    expect(await csrsOf(addon)).toHaveLength(10);
    expect(await rotatedCondition(addon)).toMatchObject({ status: "False", reason: "ClientCertificateUpdateFailed", message: TooManyCsrsMessage });
    // requests for subjects no longer wanted are let go (OCM stops their controllers)
    expect((await spoke.list<Secret>(SecretResource, { namespace: AgentNamespaceDefault, labelSelector: `${AddOnLabel.AddonName}=${addon}` })).items).toEqual([]);
  });
});

describe("removing credentials", { timeout: FLEET_TEST_MS }, () => {
  type Agent = ReturnType<typeof agent>;
  // Each row starts from an issued kubeClient credential in the default install namespace.
  type Row = { name: string; when: (addon: string, a: Agent) => Promise<void>; then: (addon: string) => Promise<void> };
  const hubKubeconfigIn = (namespace: string, addon: string) => readSecret(namespace, `${addon}-hub-kubeconfig`);
  const rows: Row[] = [
    {
      name: "removes the secret when its registration goes away",
      when: async (addon, a) => {
        await hub.patch(ManagedClusterAddOnV1alpha1Resource, addon, { status: { registrations: [] } }, { namespace: C, subresource: "status" });
        await a.reconcile(addon);
      },
      then: async (addon) => expect(await hubKubeconfigIn(DEFAULT_NS, addon)).toBeUndefined(),
    },
    {
      name: "keeps the secret while the add-on is being deleted, and removes it once the add-on is gone",
      when: async (addon, a) => {
        await hub.patch(ManagedClusterAddOnV1alpha1Resource, addon, { metadata: { finalizers: ["test.example.com/hold"] } }, { namespace: C });
        await hub.delete(ManagedClusterAddOnV1alpha1Resource, addon, C);
        await a.reconcile(addon);
        expect(await hubKubeconfigIn(DEFAULT_NS, addon)).toBeDefined(); // its agent may need it to clean up
        await hub.patch(ManagedClusterAddOnV1alpha1Resource, addon, { metadata: { finalizers: null } }, { namespace: C });
        await eventually(async () => expect(await hub.get(ManagedClusterAddOnV1alpha1Resource, addon, C)).toBeUndefined());
        await a.reconcile(addon);
      },
      then: async (addon) => expect(await hubKubeconfigIn(DEFAULT_NS, addon)).toBeUndefined(),
    },
    {
      name: "removes at once a credential whose kubeconfig names another hub (the agent moved hubs), and asks this hub for a new one",
      when: async (addon, a) => {
        const held = (await hubKubeconfigIn(DEFAULT_NS, addon))!;
        const doc = parse(Buffer.from(held.data!.kubeconfig!, "base64").toString());
        doc.clusters[0].cluster.server = "https://hub-left-behind.invalid:6443";
        await spoke.update(SecretResource, { ...held, data: { ...held.data, kubeconfig: Buffer.from(stringify(doc)).toString("base64") } });
        const before = (await csrsOf(addon)).length;
        await a.reconcile(addon);
        expect(await hubKubeconfigIn(DEFAULT_NS, addon)).toBeUndefined();
        expect(await csrsOf(addon)).toHaveLength(before + 1);
      },
      then: async (addon) => expect(await hubKubeconfigIn(DEFAULT_NS, addon)).toBeUndefined(),
    },
    {
      name: "moves the credential when the install namespace changes",
      when: async (addon, a) => {
        await spoke.create(NamespaceResource, { metadata: { name: `moved-${addon}` } });
        await hub.patch(ManagedClusterAddOnV1alpha1Resource, addon, { status: { namespace: `moved-${addon}` } }, { namespace: C, subresource: "status" });
        await a.reconcile(addon);
        expect(await hubKubeconfigIn(DEFAULT_NS, addon)).toBeUndefined();
        await approveAndWaitSigned(addon);
        await a.reconcile(addon);
      },
      then: async (addon) => expect(keysOf(await hubKubeconfigIn(`moved-${addon}`, addon))).toEqual(["cluster-name", "kubeconfig", "tls.crt", "tls.key"]),
    },
  ];
  it.each(rows)("$name", async (row) => {
    const a = agent();
    const addon = await templateAddon({ registrations: [{ type: "KubeClient" }] });
    await issued(a, addon, { namespace: DEFAULT_NS, name: `${addon}-hub-kubeconfig` });
    await row.when(addon, a);
    await row.then(addon);
  });
});

describe("events", { timeout: FLEET_TEST_MS }, () => {
  it("collects a certificate through our CloudEvents HTTP server (shared/cloudevents-server.ts), and answers 400 to a malformed event", async () => {
    const a = agent();
    const addon = await templateAddon({ registrations: [{ type: "KubeClient" }] });
    const server = await startFunctionServer(serve(fn.spec, () => a.io));
    try {
      const mca = { apiVersion: `${AddOnGroup}/v1alpha1`, kind: "ManagedClusterAddOn", ...(await readAddon(addon)) };
      const { cluster: _dropped, ...noCluster } = objectEvent({ cluster: HUB, object: mca });
      expect((await postEvent(server.url, noCluster)).status).toBe(400);
      expect(await csrsOf(addon)).toEqual([]);

      expect((await postEvent(server.url, objectEvent({ cluster: HUB, object: mca }))).status).toBe(204);
      expect(await csrsOf(addon)).toHaveLength(1);
      await approveAndWaitSigned(addon);
      // the signed CSR's event, as the relay delivers it from the hub, wakes the add-on it is labelled with
      const [csr] = await csrsOf(addon);
      expect((await postEvent(server.url, objectEvent({ cluster: HUB, object: { apiVersion: "certificates.k8s.io/v1", kind: "CertificateSigningRequest", ...csr! } }))).status).toBe(204);
      expect(keysOf(await readSecret(DEFAULT_NS, `${addon}-hub-kubeconfig`))).toEqual(["cluster-name", "kubeconfig", "tls.crt", "tls.key"]);
    } finally {
      await server.close();
    }
  });

  it("skips secrets that are not add-on credentials, and other clusters' add-ons", async () => {
    const a = agent();
    const addon = await templateAddon({ registrations: [{ type: "KubeClient" }] });
    const secret = { apiVersion: "v1", kind: "Secret", metadata: { name: "unrelated", namespace: "default" } };
    expect((await handleEvent(fn.spec, a.io, objectEvent({ cluster: C, object: secret }))).statusCode).toBe(204);
    const addonIn = (namespace: string) => ({ apiVersion: `${AddOnGroup}/v1alpha1`, kind: "ManagedClusterAddOn", metadata: { name: addon, namespace } });
    expect((await handleEvent(fn.spec, a.io, objectEvent({ cluster: HUB, object: addonIn("another-cluster") }))).statusCode).toBe(204);
    expect(await csrsOf(addon)).toEqual([]);
    // control: the same add-on in this cluster's namespace asks for its certificate
    expect((await handleEvent(fn.spec, a.io, objectEvent({ cluster: HUB, object: addonIn(C) }))).statusCode).toBe(204);
    expect(await csrsOf(addon)).toHaveLength(1);
  });
});
