/* address.ts: endpoint URLs as nng writes them, parsed for node:net/node:tls.
 *
 *   tcp://HOST:PORT       HOST a name, an IPv4 address or [IPv6]
 *   tls+tcp://HOST:PORT   the same, with TLS (nng's scheme)
 *   ipc:///abs/path       a UNIX socket (ipc://rel/path is relative)
 *
 * A name may resolve to several addresses (a Kubernetes headless Service):
 * each address is then an endpoint of its own (fleet.ts). */
import { isIP } from "node:net";

import type { Framing } from "./wire.js";

export type Transport = "tcp" | "tls" | "ipc";

/** A configured endpoint URL, before name resolution. */
export interface EndpointUrl {
  url: string;
  transport: Transport;
  host: string; // tcp/tls: the name or address as written, without brackets
  port: number;
  path: string; // ipc
}

/** One address to connect to. */
export interface Address {
  /** Stable identity: "tcp://10.0.0.7:7878", "ipc:///run/sandboxd.sock". */
  key: string;
  transport: Transport;
  host: string; // the IP address (tcp/tls)
  port: number;
  path: string;
  /** The name the URL gave, for TLS's SNI and certificate check. */
  servername: string;
}

export function framingOf(transport: Transport): Framing {
  return transport === "ipc" ? "ipc" : "tcp";
}

export function parseEndpointUrl(url: string): EndpointUrl {
  const m = /^(tcp|tls\+tcp|ipc):\/\/(.*)$/.exec(url);
  if (m === null) {
    throw new TypeError(`endpoint ${JSON.stringify(url)}: want tcp://, tls+tcp:// or ipc://`);
  }
  const scheme = m[1]!;
  const rest = m[2]!;
  if (scheme === "ipc") {
    if (rest === "" || rest.includes("\0")) {
      throw new TypeError(`endpoint ${JSON.stringify(url)}: an ipc:// URL needs a socket path`);
    }
    return { url, transport: "ipc", host: "", port: 0, path: rest };
  }
  const hp = /^\[([0-9A-Fa-f:.]+)\]:(\d{1,5})$/.exec(rest) ?? /^([^:/[\]@]+):(\d{1,5})$/.exec(rest);
  const port = hp === null ? NaN : Number(hp[2]);
  if (hp === null || port < 1 || port > 65535) {
    throw new TypeError(`endpoint ${JSON.stringify(url)}: want ${scheme}://HOST:PORT`);
  }
  return { url, transport: scheme === "tcp" ? "tcp" : "tls", host: hp[1]!, port, path: "" };
}

/** True when the URL names a host that DNS must turn into addresses. */
export function needsResolution(e: EndpointUrl): boolean {
  return e.transport !== "ipc" && isIP(e.host) === 0;
}

export function addressOf(e: EndpointUrl, ip: string): Address {
  if (e.transport === "ipc") {
    return { key: `ipc://${e.path}`, transport: "ipc", host: "", port: 0, path: e.path, servername: "" };
  }
  const scheme = e.transport === "tls" ? "tls+tcp" : "tcp";
  const hostPart = isIP(ip) === 6 ? `[${ip}]` : ip;
  return {
    key: `${scheme}://${hostPart}:${e.port}`,
    transport: e.transport,
    host: ip,
    port: e.port,
    path: "",
    servername: e.host,
  };
}
