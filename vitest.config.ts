// Test runner settings: control-plane tests start real processes, so they get generous timeouts
// and run one file at a time on CI's two cores.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 180_000,
    pool: "forks",
    fileParallelism: false,
    reporters: ["default"],
  },
});
