// Renders an AddOnTemplate's agent manifests for one cluster (ocm templateagent): {{VARIABLE}}
// substitution, then Deployments and DaemonSets decorated with the preset variables as environment,
// registration secrets as volumes, node placement, image mirrors, proxy and resource requirements,
// then namespaces moved to the AddOnDeploymentConfig's agentInstallNamespace. Pure: values in, objects out.
import type { KubeObject } from "../../shared/kube/client.ts";
import type { AddOnDeploymentConfig, AddOnTemplate } from "../../shared/api/addon.ts";
import type { ManagedCluster } from "../../shared/api/cluster.ts";
import {
  ClusterImageRegistriesAnnotation,
  DefaultHubKubeconfigPath,
  HubKubeconfigMountDir,
  HubKubeconfigVolumeName,
  ProxyCaBundleKey,
  ProxyCaMountDir,
  TemplateVariable,
  customSignedMountDir,
  customSignedSecretName,
  customSignedVolumeName,
  hubKubeconfigSecretName,
  proxyCaConfigMapName,
} from "../../shared/api/addon-strings.ts";
import { DefaultAddOnInstallNamespace } from "../../shared/api/addon.ts";

type AdcSpec = AddOnDeploymentConfig["spec"];
type ImageMirror = NonNullable<AdcSpec["registries"]>[number];
type Json = Record<string, unknown>;
type Container = Json & { name?: string; image?: string; env?: Json[]; volumeMounts?: Json[]; resources?: unknown };
type PodSpec = Json & { containers?: Container[]; volumes?: Json[]; nodeSelector?: unknown; tolerations?: unknown };

export type RenderInput = {
  addon: string;
  cluster: ManagedCluster;
  template: AddOnTemplate;
  adc?: AddOnDeploymentConfig;
  // the agent's install namespace (status.namespace); the value of INSTALL_NAMESPACE
  installNamespace: string;
};

export type Variables = { values: Map<string, string>; preset: [string, string][] };

// Lowest to highest: defaults (HUB_KUBECONFIG when the template registers), the
// AddOnDeploymentConfig's customizedVariables, then the built-ins nobody may override. The preset
// list (defaults, then built-ins, each sorted) is what every agent container gets as environment.
export function templateVariables(i: RenderInput): Variables {
  const defaults = new Map<string, string>(i.template.spec.registration !== undefined ? [[TemplateVariable.HubKubeconfig, DefaultHubKubeconfigPath]] : []);
  // OCM defines INSTALL_NAMESPACE only when an AddOnDeploymentConfig names one; here it is always the
  // agent's install namespace, so a template can place its objects there without a config.
  const builtins = new Map<string, string>([
    [TemplateVariable.ClusterName, i.cluster.metadata.name],
    [TemplateVariable.InstallNamespace, i.installNamespace],
  ]);
  const values = new Map(defaults);
  for (const v of i.adc?.spec.customizedVariables ?? []) values.set(v.name, v.value ?? "");
  for (const [k, v] of builtins) values.set(k, v);
  const preset = [...[...defaults.keys()].sort(), ...[...builtins.keys()].sort()].map((k): [string, string] => [k, values.get(k)!]);
  return { values, preset };
}

// fasttemplate as OCM runs it over each manifest's JSON: the tag is the text between {{ and }}
// verbatim, and an unknown tag renders as nothing. Values are JSON-escaped (OCM inserts them raw, so a
// quote in a value breaks the manifest there).
export function substitute(manifest: Json, values: ReadonlyMap<string, string>): Json {
  const text = JSON.stringify(manifest).replace(/\{\{([\s\S]*?)\}\}/g, (_, tag: string) => {
    const v = values.get(tag);
    return v === undefined ? "" : JSON.stringify(v).slice(1, -1);
  });
  return JSON.parse(text) as Json;
}

export function renderManifests(i: RenderInput): KubeObject[] {
  const vars = templateVariables(i);
  const spec = i.adc?.spec;
  const registries = spec?.registries ?? clusterRegistries(i.cluster);
  const rendered = (i.template.spec.agentSpec.workload?.manifests ?? []).map((m) => substitute(m as Json, vars.values) as KubeObject);
  const decorated = rendered.map((obj) => {
    const workload = workloadOf(obj);
    if (workload) {
      const pod = podSpecOf(obj);
      if (pod) decoratePod(pod, { name: obj.metadata.name ?? "", resource: workload, addon: i.addon, template: i.template, preset: vars.preset, spec, registries });
    }
    return obj;
  });
  const caBundle = spec?.proxyConfig?.caBundle;
  const injected: KubeObject[] = caBundle
    ? [{ apiVersion: "v1", kind: "ConfigMap", metadata: { name: proxyCaConfigMapName(i.addon), namespace: DefaultAddOnInstallNamespace }, data: { [ProxyCaBundleKey]: Buffer.from(caBundle, "base64").toString() } }]
    : [];
  const namespace = spec?.agentInstallNamespace;
  return [...decorated, ...injected].map((obj) => (namespace ? moveNamespace(obj, namespace) : obj));
}

function workloadOf(obj: KubeObject): "deployments" | "daemonsets" | undefined {
  const group = (obj.apiVersion ?? "").split("/")[0];
  if (group !== "apps") return undefined;
  return obj.kind === "Deployment" ? "deployments" : obj.kind === "DaemonSet" ? "daemonsets" : undefined;
}

function podSpecOf(obj: KubeObject): PodSpec | undefined {
  const template = ((obj.spec as Json | undefined)?.template ?? undefined) as Json | undefined;
  if (!template) return undefined;
  template.spec ??= {};
  return template.spec as PodSpec;
}

type PodDecoration = {
  name: string;
  resource: "deployments" | "daemonsets";
  addon: string;
  template: AddOnTemplate;
  preset: [string, string][];
  spec?: AdcSpec;
  registries?: ImageMirror[];
};

// The decorators in OCM's order: environment, volumes, node placement, image, proxy, resources.
function decoratePod(pod: PodSpec, d: PodDecoration): void {
  const containers = pod.containers ?? [];
  const addEnv = (pairs: [string, string][]) => {
    for (const c of containers) c.env = [...(c.env ?? []), ...pairs.map(([name, value]) => ({ name, value }))];
  };
  const addVolume = (volume: Json, mountPath: string) => {
    for (const c of containers) c.volumeMounts = [...(c.volumeMounts ?? []), { name: volume.name, mountPath }];
    pod.volumes = [...(pod.volumes ?? []), volume];
  };

  addEnv(d.preset);

  for (const r of d.template.spec.registration ?? []) {
    if (r.type === "KubeClient") addVolume({ name: HubKubeconfigVolumeName, secret: { secretName: hubKubeconfigSecretName(d.addon) } }, HubKubeconfigMountDir);
    else if (r.type === "CustomSigner" && r.customSigner) {
      const signer = r.customSigner.signerName;
      addVolume({ name: customSignedVolumeName(signer), secret: { secretName: customSignedSecretName(d.addon, signer) } }, customSignedMountDir(signer));
    }
  }

  // OCM sets tolerations only when a nodeSelector is given too; here each is set when given.
  const placement = d.spec?.nodePlacement;
  if (placement?.nodeSelector) pod.nodeSelector = placement.nodeSelector;
  if (placement?.tolerations) pod.tolerations = placement.tolerations;

  if (d.registries?.length) for (const c of containers) if (c.image) c.image = overrideImage(d.registries, c.image);

  const proxy = d.spec?.proxyConfig;
  if (proxy) {
    const pairs: [string, string][] = [];
    if (proxy.httpProxy) pairs.push(["HTTP_PROXY", proxy.httpProxy], ["http_proxy", proxy.httpProxy]);
    if (proxy.httpsProxy) pairs.push(["HTTPS_PROXY", proxy.httpsProxy], ["https_proxy", proxy.httpsProxy]);
    if (proxy.noProxy) pairs.push(["NO_PROXY", proxy.noProxy], ["no_proxy", proxy.noProxy]);
    if (pairs.length) {
      addEnv(pairs);
      if (proxy.caBundle) {
        addEnv([["CA_BUNDLE_FILE_PATH", `${ProxyCaMountDir}/${ProxyCaBundleKey}`]]);
        addVolume({ name: "proxy-ca-bundle", configMap: { name: proxyCaConfigMapName(d.addon) } }, ProxyCaMountDir);
      }
    }
  }

  // containerID "<deployments|daemonsets>:<name>:<container>", "*" for any part; the last match wins.
  const requirements = d.spec?.resourceRequirements ?? [];
  for (const c of containers) {
    const id = `${d.resource}:${d.name}:${c.name ?? ""}`;
    const match = [...requirements].reverse().find((r) => containerIdPattern(r.containerID)?.test(id));
    if (match) c.resources = match.resources;
  }
}

function containerIdPattern(containerID: string): RegExp | undefined {
  const parts = containerID.split(":");
  if (parts.length !== 3) return undefined;
  try {
    return new RegExp(`^${parts.map((p) => (p === "*" ? ".+" : p)).join(":")}$`);
  } catch {
    return undefined;
  }
}

// addon-framework OverrideImage: each mirror whose source prefixes the image replaces that prefix; a
// mirror without source replaces the whole registry path; the last matching mirror wins.
export function overrideImage(registries: readonly ImageMirror[], image: string): string {
  let result = image;
  for (const r of registries) {
    const name = overrideDirectly(r.source ?? "", r.mirror, image);
    if (name !== image) result = name;
  }
  return result;
}

function overrideDirectly(sourceIn: string, mirrorIn: string, image: string): string {
  const source = sourceIn.replace(/\/$/, "");
  const mirror = mirrorIn.replace(/\/$/, "");
  const nameTag = image.split("/").at(-1)!;
  if (!source) return mirror ? `${mirror}/${nameTag}` : nameTag;
  if (!image.startsWith(source)) return image;
  return `${mirror}${image.slice(source.length)}`;
}

// The ManagedCluster annotation's mirrors, used when no AddOnDeploymentConfig names any.
function clusterRegistries(cluster: ManagedCluster): ImageMirror[] | undefined {
  const text = cluster.metadata.annotations?.[ClusterImageRegistriesAnnotation];
  if (!text) return undefined;
  try {
    const parsed = JSON.parse(text) as { registries?: ImageMirror[] };
    return parsed.registries?.length ? parsed.registries : undefined;
  } catch {
    return undefined; // OCM logs and renders without mirrors
  }
}

// OCM's namespace decorator: namespaced objects move, and so do binding subjects and a Namespace's name.
function moveNamespace(obj: KubeObject, namespace: string): KubeObject {
  if (obj.metadata.namespace) obj.metadata.namespace = namespace;
  if (obj.kind === "ClusterRoleBinding" || obj.kind === "RoleBinding") for (const s of (obj.subjects as Json[] | undefined) ?? []) s.namespace = namespace;
  if (obj.kind === "Namespace") obj.metadata.name = namespace;
  return obj;
}
