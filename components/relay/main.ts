// The relay as a process: `node components/relay/main.ts --config relay.yaml`, or in a ContainerSource with the
// configuration in OCM_RELAY_CONFIG and the sink in K_SINK. Stops cleanly on SIGTERM/SIGINT.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { jsonLog } from "../../shared/harness.ts";
import { stopOnSignals } from "../../shared/stop-signals.ts";
import { configFromEnvironment } from "./config.ts";
import { startRelay, type Relay } from "./relay.ts";

const log = jsonLog("relay");
const { values } = parseArgs({ options: { config: { type: "string" } } });
const file = values.config ?? process.env.OCM_RELAY_CONFIG_FILE;

let relay: Relay;
try {
  relay = startRelay({ ...configFromEnvironment(file ? readFileSync(file, "utf8") : process.env.OCM_RELAY_CONFIG, process.env), log });
} catch (err) {
  log.error({ error: err instanceof Error ? err.message : String(err) }, "not started");
  process.exit(2);
}
// A metrics or recheck port that cannot be had ends the process at start, like a bad setting.
try {
  await relay.metrics;
  await relay.rechecks;
} catch {
  await relay.stop();
  process.exit(2);
}

stopOnSignals(async (signal) => {
  log.info({ signal }, "stopping");
  await relay.stop();
});
