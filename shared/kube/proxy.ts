// Requests through a kubeconfig's proxy-url: a tunnel through an HTTP(S) proxy (CONNECT) or a SOCKS5
// one, and the API server's TLS inside it. One tunnel per request, as client-node's proxy agents made
// them, so every request meets the proxy (and a proxy that went away is noticed at once).
import type { ClientRequestArgs } from "node:http";
import { connect as netConnect, isIP, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { connect as tlsConnect, type ConnectionOptions } from "node:tls";

const HANDSHAKE_TIMEOUT_MS = 30_000;

type Connector = NonNullable<ClientRequestArgs["createConnection"]>;

export const ProxySchemes = ["http:", "https:", "socks5:", "socks5h:"] as const;

// A proxy URL taken apart, its credentials decoded: everything a tunnel needs, known before any socket
// exists, so a URL that cannot be used is an error at configuration time and never one on a socket.
export type ProxyTarget = { host: string; port: number; secure: boolean; socks: boolean; user: string; password: string; display: string };

// Throws an Error saying what is wrong with the URL (without its password), the URL called `label`.
export function parseProxyURL(text: string, label = "proxy URL"): ProxyTarget {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new Error(`${label} ${JSON.stringify(redact(text))} is not a URL`);
  }
  const display = `${url.protocol}//${url.host}`;
  if (!(ProxySchemes as readonly string[]).includes(url.protocol)) throw new Error(`${label} ${display}: the scheme must be http, https, socks5 or socks5h`);
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
  if (!host) throw new Error(`${label} ${display}: no host`);
  const decode = (part: string, what: string) => {
    try {
      return decodeURIComponent(part);
    } catch {
      throw new Error(`${label} ${display}: the ${what} is not valid percent-encoded UTF-8`);
    }
  };
  const user = decode(url.username, "user name");
  const password = decode(url.password, "password");
  const socks = url.protocol.startsWith("socks5");
  // RFC 1929: each is one length byte and 1 to 255 bytes.
  if (socks && (Buffer.byteLength(user) > 255 || Buffer.byteLength(password) > 255)) throw new Error(`${label} ${display}: a SOCKS5 user name and password are at most 255 bytes each`);
  if (socks && password && !user) throw new Error(`${label} ${display}: a SOCKS5 password needs a user name`);
  const secure = url.protocol === "https:";
  return { host, port: Number(url.port) || (socks ? 1080 : secure ? 443 : 80), secure, socks, user, password, display };
}

// The URL without its credentials, for a message about a URL that did not parse.
const redact = (text: string) => text.replace(/\/\/[^/@]*@/, "//***@");

// For https.request's createConnection (with no agent): it gets the request's options, TLS ones included.
// Throws at once for a proxy URL that cannot be used; every later failure is the request's error.
export function proxyConnector(proxyUrl: string): Connector {
  const proxy = parseProxyURL(proxyUrl);
  return (options, done) => {
    const fail = (err: unknown) => done(err instanceof Error ? err : new Error(String(err)), undefined as unknown as Duplex);
    try {
      const o = options as ClientRequestArgs & ConnectionOptions;
      const host = String(o.hostname ?? o.host ?? "").replace(/^\[(.*)\]$/, "$1");
      const port = Number(o.port) || 443;
      tunnel(proxy, host, port).then((socket) => {
        try {
          const tls: ConnectionOptions = { socket, host, ca: o.ca, cert: o.cert, key: o.key, rejectUnauthorized: o.rejectUnauthorized };
          // SNI takes a name, never an address; the certificate is checked against servername, else host.
          const servername = o.servername || (isIP(host) ? undefined : host);
          if (servername) tls.servername = servername;
          done(null, tlsConnect(tls));
        } catch (err) {
          socket.destroy();
          fail(err);
        }
      }, fail);
    } catch (err) {
      fail(err);
    }
    return undefined;
  };
}

function tunnel(proxy: ProxyTarget, host: string, port: number): Promise<Socket> {
  const { secure, socks, user, password } = proxy;
  return new Promise<Socket>((resolve, reject) => {
    const socket: Socket = secure ? tlsConnect({ host: proxy.host, port: proxy.port, ...(isIP(proxy.host) ? {} : { servername: proxy.host }) }) : netConnect(proxy.port, proxy.host);
    // The listeners first: nothing between the socket's creation and them can throw.
    const failed = (err: Error) => {
      socket.destroy();
      reject(err);
    };
    const closed = () => failed(new Error(`proxy ${proxy.display} closed the connection`));
    socket.on("error", failed);
    socket.once("close", closed);
    socket.setTimeout(HANDSHAKE_TIMEOUT_MS, () => failed(new Error(`proxy ${proxy.display} did not answer within ${HANDSHAKE_TIMEOUT_MS / 1_000} s`)));
    socket.once(secure ? "secureConnect" : "connect", () => {
      const reader = byteReader(socket);
      (socks ? socks5(socket, reader, host, port, user, password) : httpConnect(socket, reader, host, port, user, password)).then(() => {
        reader.release();
        socket.setTimeout(0);
        socket.off("error", failed).off("close", closed);
        resolve(socket);
      }, failed);
    });
  });
}

type Reader = { read(complete: (b: Buffer) => number | undefined): Promise<Buffer>; release(): void };

// Reads what the handshake needs: complete(buffered) says how many bytes make the next answer, or
// undefined while more must come. What comes after goes back to the socket for TLS.
function byteReader(socket: Socket): Reader {
  let buffered = Buffer.alloc(0);
  let waiting: { complete: (b: Buffer) => number | undefined; resolve: (b: Buffer) => void } | undefined;
  const pump = () => {
    const n = waiting && waiting.complete(buffered);
    if (!waiting || n === undefined) return;
    const answer = buffered.subarray(0, n);
    buffered = buffered.subarray(n);
    const w = waiting;
    waiting = undefined;
    w.resolve(answer);
  };
  const onData = (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    pump();
  };
  socket.on("data", onData);
  return {
    read: (complete) =>
      new Promise((resolve) => {
        waiting = { complete, resolve };
        pump();
      }),
    release() {
      socket.removeListener("data", onData);
      socket.pause();
      if (buffered.length) socket.unshift(buffered);
    },
  };
}

const hostPort = (host: string, port: number) => `${isIP(host) === 6 ? `[${host}]` : host}:${port}`;

async function httpConnect(socket: Socket, reader: Reader, host: string, port: number, user: string, password: string): Promise<void> {
  const target = hostPort(host, port);
  const auth = user ? `Proxy-Authorization: Basic ${Buffer.from(`${user}:${password}`).toString("base64")}\r\n` : "";
  socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n${auth}\r\n`);
  const head = await reader.read((b) => {
    const end = b.indexOf("\r\n\r\n");
    return end < 0 ? undefined : end + 4;
  });
  const status = head.toString("latin1").split("\r\n")[0] ?? "";
  if (!/^HTTP\/1\.[01] 2\d\d/.test(status)) throw new Error(`proxy refused the tunnel to ${target}: ${status}`);
}

// RFC 1928 (CONNECT, by name so the proxy resolves it) and RFC 1929 (username and password).
async function socks5(socket: Socket, reader: Reader, host: string, port: number, user: string, password: string): Promise<void> {
  const exactly = (n: number) => (b: Buffer) => (b.length >= n ? n : undefined);
  socket.write(Buffer.from(user ? [5, 2, 0, 2] : [5, 1, 0]));
  const [, method] = await reader.read(exactly(2));
  if (method === 2) {
    const u = Buffer.from(user);
    const p = Buffer.from(password);
    socket.write(Buffer.concat([Buffer.from([1, u.length]), u, Buffer.from([p.length]), p]));
    const [, status] = await reader.read(exactly(2));
    if (status !== 0) throw new Error("SOCKS5 proxy refused the username and password");
  } else if (method !== 0) throw new Error("SOCKS5 proxy accepts none of our authentication methods");
  const kind = isIP(host);
  const address = kind === 4 ? Buffer.from([1, ...host.split(".").map(Number)]) : kind === 6 ? Buffer.concat([Buffer.from([4]), ipv6Bytes(host)]) : Buffer.concat([Buffer.from([3, Buffer.byteLength(host)]), Buffer.from(host)]);
  socket.write(Buffer.concat([Buffer.from([5, 1, 0]), address, Buffer.from([port >> 8, port & 0xff])]));
  const reply = await reader.read((b) => {
    if (b.length < 5) return undefined;
    const addressLength = b[3] === 1 ? 4 : b[3] === 4 ? 16 : 1 + b[4]!;
    return b.length >= 6 + addressLength ? 6 + addressLength : undefined;
  });
  if (reply[1] !== 0) throw new Error(`SOCKS5 proxy refused the connection to ${hostPort(host, port)} (reply ${reply[1]})`);
}

// Eight 16-bit groups with "::" expanded; an IPv4 tail (::ffff:1.2.3.4) is the last two.
function ipv6Bytes(host: string): Buffer {
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(host);
  const hex = v4 ? `${host.slice(0, v4.index)}${((+v4[1]! << 8) | +v4[2]!).toString(16)}:${((+v4[3]! << 8) | +v4[4]!).toString(16)}` : host;
  const [head, tail] = hex.split("::");
  const groups = (s: string | undefined) => (s ? s.split(":") : []);
  const all = tail === undefined ? groups(head) : [...groups(head), ...Array<string>(8 - groups(head).length - groups(tail).length).fill("0"), ...groups(tail)];
  return Buffer.from(all.flatMap((g) => [parseInt(g, 16) >> 8, parseInt(g, 16) & 0xff]));
}
