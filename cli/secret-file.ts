// Files the CLI writes that hold a credential (a bootstrap kubeconfig with its token, an admin
// kubeconfig): readable by their owner only, from the first byte, whatever was at that path before.
import { randomBytes } from "node:crypto";
import { closeSync, fsyncSync, openSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";

// A new file beside the target, created exclusively with mode 0600, then renamed over the target.
// Writing into an existing file would keep its mode (a 0644 file stays 0644 with the token in it) and
// its hard links; a chmod after the write would leave a window. The rename swaps the whole file at once.
export function writeSecretFile(file: string, text: string): void {
  const temp = join(dirname(file), `.${basename(file)}.${randomBytes(6).toString("hex")}.tmp`);
  let fd: number | undefined;
  try {
    fd = openSync(temp, "wx", 0o600);
    writeFileSync(fd, text);
    fsyncSync(fd);
    closeSync(fd);
    fd = undefined;
    renameSync(temp, file);
  } catch (err) {
    if (fd !== undefined) closeSync(fd);
    rmSync(temp, { force: true });
    throw new Error(`cannot write ${file}: ${(err as Error).message}`);
  }
}
