// A TCP hop on loopback in front of an API server that a test can cut: the connections through it end
// and new ones are refused until a proxy is started again on the same port, while the server stays up.
import { connect, createServer, type Server, type Socket } from "node:net";

export type CuttableProxy = { port: number; url: string; cut(): Promise<void> };

export async function startCuttableProxy(targetPort: number, port = 0): Promise<CuttableProxy> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(targetPort, "127.0.0.1");
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => s.destroy());
      s.on("close", () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  const bound = (server.address() as { port: number }).port;
  return {
    port: bound,
    url: `https://127.0.0.1:${bound}`,
    cut: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
