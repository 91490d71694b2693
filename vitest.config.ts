// Test runner settings: control-plane tests start real processes, so they get generous timeouts.
// On CI's two cores the files run two at a time, each starting its own control planes on free ports
// in its own temporary directories; then the real node's tests (one node with Service routing per
// machine) run one at a time, by themselves. The image builds' file writes the shared image cache
// (~/.cache/ocm-functions/images) the node's tests build into too, so it runs with the first group,
// which always ends before the second starts.
import { defineConfig } from "vitest/config";

const alone = ["test/node.test.ts", "test/eventing-node.test.ts", "test/serving-node.test.ts"];

const common = { testTimeout: 60_000, hookTimeout: 180_000, pool: "forks" as const };

export default defineConfig({
  test: {
    reporters: ["default"],
    projects: [
      { test: { ...common, name: "together", include: ["test/**/*.test.ts"], exclude: alone, maxWorkers: 2, sequence: { groupOrder: 0 } } },
      { test: { ...common, name: "alone", include: alone, maxWorkers: 1, sequence: { groupOrder: 1 } } },
    ],
  },
});
