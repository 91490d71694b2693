// The relay as a process: `node components/relay/main.ts --config relay.yaml`, or in a ContainerSource with the
// configuration in OCM_RELAY_CONFIG and the sink in K_SINK. Stops cleanly on SIGTERM/SIGINT. On a spoke it
// also keeps the heartbeat (its `heartbeat` setting), and says at the stop what the heartbeat did.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { jsonLog } from "../../shared/harness.ts";
import { stopOnSignals } from "../../shared/stop-signals.ts";
import { configFromEnvironment } from "./config.ts";
import { startRelay, type Relay } from "./relay.ts";

// Module loading, JIT warm-up and the first TLS handshakes are over by then.
const WARM_AFTER_RENEWALS = 3;

const log = jsonLog("relay");
const { values } = parseArgs({ options: { config: { type: "string" } } });
const file = values.config ?? process.env.OCM_RELAY_CONFIG_FILE;

let relay: Relay;
let warm: { renewals: number; cpu: NodeJS.CpuUsage } | undefined;
try {
  relay = startRelay({
    ...configFromEnvironment(file ? readFileSync(file, "utf8") : process.env.OCM_RELAY_CONFIG, process.env),
    log,
    onBeat(s) {
      if (!warm && s.renewals >= WARM_AFTER_RENEWALS) warm = { renewals: s.renewals, cpu: process.cpuUsage() };
    },
  });
} catch (err) {
  log.error({ error: err instanceof Error ? err.message : String(err) }, "not started");
  process.exit(2);
}
// A metrics, recheck or health port that cannot be had ends the process at start, like a bad setting.
try {
  await relay.metrics;
  await relay.rechecks;
  await relay.heartbeat;
} catch {
  await relay.stop();
  process.exit(2);
}

stopOnSignals(async (signal) => {
  log.info({ signal }, "stopping");
  const beats = relay.status().heartbeat;
  await relay.stop();
  if (!beats) return;
  // The heartbeat's counters, and the CPU per renewal once warm (bench/heartbeat.ts reads them).
  const cpu = process.cpuUsage();
  const steady = warm && beats.renewals > warm.renewals ? { renewals: beats.renewals - warm.renewals, cpuUs: cpu.user + cpu.system - warm.cpu.user - warm.cpu.system } : undefined;
  log.info({ beats: beats.beats, renewals: beats.renewals, cpuUs: cpu.user + cpu.system, rssBytes: process.memoryUsage.rss(), steady }, "heartbeat stopped");
});
