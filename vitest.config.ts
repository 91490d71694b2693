// Test runner settings: control-plane tests start real processes, so they get generous timeouts.
// On CI's two cores the files run two at a time, each starting its own control planes on free ports
// in its own temporary directories; then the files that need this machine to themselves run one at a
// time: the real node's tests (one node with Service routing per machine) and the image builds that
// write the shared image cache. No other file touches the node or that cache.
import { defineConfig } from "vitest/config";

const alone = ["test/node.test.ts", "test/eventing-node.test.ts", "test/serving-node.test.ts", "test/images.test.ts"];

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
