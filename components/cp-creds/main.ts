// The ClusterProfile credentials plugin's entry (plugin.ts): prints the ExecCredential, or the reason on
// stderr and exit 1, as client-go expects of an exec plugin.
import { ProviderName, token } from "./plugin.ts";

token(process.argv.slice(2), process.env).then(
  (out) => process.stdout.write(`${out}\n`),
  (err: Error) => {
    process.stderr.write(`[${ProviderName}] ${err.message}\n`);
    process.exit(1);
  },
);
