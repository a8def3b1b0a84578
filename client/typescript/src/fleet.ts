/* fleet.ts: the endpoints a client calls, and which one takes a call.
 *
 * Each configured URL is one endpoint, except a host name, which counts as
 * one endpoint per address it resolves to (a Kubernetes headless Service),
 * resolved again every resolveIntervalMs and whenever no endpoint is usable.
 * Calls go to the usable endpoint with the fewest calls in flight (round
 * robin among equals). An endpoint whose connection failed or broke is dead:
 * skipped, and reconnected in the background with backoff until it answers
 * the SP handshake again.
 *
 * This file decides where a call goes before it is sent; it never sends one.
 * The at-most-once rule (a call that may have run is never sent anywhere
 * else) is kept by the caller, which asks for an endpoint again only after a
 * failure that proves nothing ran. A session lives on one server, so its
 * calls always go to the same endpoint (see sessionTarget). */
import { lookup as dnsLookup } from "node:dns/promises";

import { type Address, addressOf, type EndpointUrl, needsResolution, parseEndpointUrl } from "./address.js";
import { type ConnectOptions, SpConnection, TransportError } from "./connection.js";

/** Resolves a host name to its addresses (dns.lookup with all: true). */
export type Resolver = (host: string) => Promise<string[]>;

export interface FleetOptions extends ConnectOptions {
  resolveIntervalMs: number;
  reconnectBaseMs: number;
  reconnectMaxMs: number;
  resolver?: Resolver | undefined;
}

export type EndpointState = "idle" | "live" | "dead";

export interface EndpointStatus {
  key: string;
  url: string;
  state: EndpointState;
  inFlight: number;
  /** Connections opened so far (1 + reconnects). */
  connections: number;
  /** Connects tried so far, failed ones included. */
  connectAttempts: number;
}

const MAX_SESSION_PINS = 10000;
const WAIT_POLL_MS = 100;

async function defaultResolver(host: string): Promise<string[]> {
  const all = await dnsLookup(host, { all: true, verbatim: true });
  return all.map((a) => a.address);
}

export class Endpoint {
  state: EndpointState = "idle";
  /** Calls given this endpoint and not yet released. */
  assigned = 0;
  /** The server's --max-message-bytes from GetInfo: undefined until asked,
   * Infinity when it could not be learnt (the request then decides). */
  serverMaxBytes: number | undefined;
  removed = false;
  /** Why the last connect failed, for the caller's error message. */
  lastError = "";
  connections = 0;
  connectAttempts = 0;
  private conn: SpConnection | null = null;
  private connecting: Promise<SpConnection> | null = null;
  private failures = 0;
  private retryTimer: NodeJS.Timeout | null = null;

  constructor(
    readonly address: Address,
    readonly url: string,
    private readonly fleet: Fleet,
  ) {}

  /** The open connection, connecting first when there is none. Rejects
   * with a TransportError of kind "connect" (nothing was sent). */
  connection(): Promise<SpConnection> {
    if (this.conn !== null && !this.conn.closed) {
      return Promise.resolve(this.conn);
    }
    this.connecting ??= this.open().finally(() => {
      this.connecting = null;
    });
    return this.connecting;
  }

  status(): EndpointStatus {
    return { key: this.address.key, url: this.url, state: this.state, inFlight: this.assigned, connections: this.connections, connectAttempts: this.connectAttempts };
  }

  /** Called when the endpoint is left out of the address set or the client
   * closes: no new calls, the connection goes once its calls are done. */
  retire(): void {
    this.removed = true;
    this.clearRetry();
    this.closeIfUnused();
  }

  closeIfUnused(): void {
    if (this.removed && this.assigned === 0) {
      this.conn?.close();
    }
  }

  markDead(): void {
    this.state = "dead";
    this.failures++;
    this.scheduleReconnect();
  }

  private async open(): Promise<SpConnection> {
    this.connectAttempts++;
    try {
      const conn = await SpConnection.connect(this.address, this.fleet.options);
      if (this.removed) {
        conn.close();
        throw new TransportError("connect", false, `${this.address.key}: endpoint removed`);
      }
      conn.onClose = (reason, hadPending) => this.onConnectionClosed(conn, reason, hadPending);
      this.conn = conn;
      this.connections++;
      this.state = "live";
      this.failures = 0;
      this.clearRetry();
      this.fleet.notify();
      return conn;
    } catch (err) {
      this.lastError = (err as Error).message;
      if (!this.removed) {
        this.markDead();
      }
      throw err;
    }
  }

  private onConnectionClosed(conn: SpConnection, reason: Error | null, hadPending: boolean): void {
    if (this.conn === conn) {
      this.conn = null;
    }
    if (this.removed) {
      return;
    }
    // A clean close of an idle connection is the server's --idle-timeout-ms:
    // reconnect when the next call needs it. A close with calls in flight or
    // with an error is a server gone: skip it until it answers again.
    if (reason === null && !hadPending) {
      this.state = "idle";
    } else {
      this.markDead();
    }
  }

  private scheduleReconnect(): void {
    if (this.retryTimer !== null || this.removed || this.fleet.closed) {
      return;
    }
    const exp = Math.min(this.fleet.options.reconnectMaxMs, this.fleet.options.reconnectBaseMs * 2 ** Math.min(this.failures - 1, 16));
    const delay = exp + Math.random() * exp * 0.5;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.connection().catch(() => {
        /* open() scheduled the next try */
      });
    }, delay);
    this.retryTimer.unref();
  }

  private clearRetry(): void {
    if (this.retryTimer !== null) {
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
  }
}

interface Group {
  url: EndpointUrl;
  endpoints: Map<string, Endpoint>;
  resolvedAt: number;
  resolving: Promise<void> | null;
  lastError: string;
}

export interface AcquireOptions {
  /** Endpoints that just answered RESOURCE_EXHAUSTED/UNAVAILABLE: avoided
   * while another is usable. */
  avoid?: ReadonlySet<string> | undefined;
  /** Calls of a session go to the endpoint that holds it. */
  sessionId?: string | undefined;
  /** Monotonic ms (performance.now()) after which waiting for an endpoint stops. */
  deadline: number;
  /** The wait that deadline stands for, named in the error (connectTimeoutMs). */
  timeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
}

export class Fleet {
  closed = false;
  private readonly groups: Group[];
  private readonly resolver: Resolver;
  private readonly sessionPins = new Map<string, string>();
  private waiters = new Set<() => void>();
  private rr = 0;

  constructor(
    urls: readonly string[],
    readonly options: FleetOptions,
  ) {
    if (urls.length === 0) {
      throw new TypeError("a Client needs at least one endpoint URL");
    }
    this.resolver = options.resolver ?? defaultResolver;
    this.groups = urls.map((u) => this.makeGroup(parseEndpointUrl(u)));
  }

  endpoints(): Endpoint[] {
    return this.groups.flatMap((g) => [...g.endpoints.values()]);
  }

  /** Wakes calls waiting for an endpoint (one became live). */
  notify(): void {
    const ws = this.waiters;
    this.waiters = new Set();
    for (const w of ws) {
      w();
    }
  }

  close(): void {
    this.closed = true;
    for (const e of this.endpoints()) {
      e.retire();
    }
    this.notify();
  }

  /** Picks an endpoint and connects to it; waits, up to opts.deadline, while
   * none is usable. Rejects with TransportError "connect" when none could be
   * had (nothing was sent) or "aborted". The caller must release(). */
  async acquire(opts: AcquireOptions): Promise<{ endpoint: Endpoint; conn: SpConnection }> {
    for (;;) {
      if (this.closed) {
        throw new TransportError("connect", false, "the client is closed");
      }
      if (opts.signal?.aborted) {
        throw new TransportError("aborted", false, "aborted before the request was sent");
      }
      await this.refresh(false);
      const candidates = this.candidates(opts);
      const chosen = this.pick(candidates, opts.avoid);
      if (chosen !== undefined) {
        chosen.assigned++;
        try {
          return { endpoint: chosen, conn: await chosen.connection() };
        } catch {
          this.release(chosen); // marked dead; nothing was sent, so try another
          continue;
        }
      }
      if (performance.now() >= opts.deadline) {
        throw new TransportError("connect", false, this.unreachableMessage(candidates, opts.sessionId, opts.timeoutMs));
      }
      void this.refresh(true);
      await this.waitForChange(opts.deadline, opts.signal);
    }
  }

  release(e: Endpoint): void {
    e.assigned--;
    e.closeIfUnused();
  }

  /** Remembers where a session lives once a call of it was answered there. */
  pinSession(sessionId: string, e: Endpoint): void {
    this.sessionPins.delete(sessionId);
    this.sessionPins.set(sessionId, e.address.key);
    if (this.sessionPins.size > MAX_SESSION_PINS) {
      const oldest = this.sessionPins.keys().next().value;
      if (oldest !== undefined) {
        this.sessionPins.delete(oldest);
      }
    }
  }

  forgetSession(sessionId: string): void {
    this.sessionPins.delete(sessionId);
  }

  private candidates(opts: AcquireOptions): Endpoint[] {
    const all = this.endpoints().filter((e) => !e.removed);
    if (opts.sessionId === undefined || opts.sessionId === "") {
      return all;
    }
    const target = this.sessionTarget(opts.sessionId, all);
    return target === undefined ? [] : [target];
  }

  /** The endpoint of a session: where this client last saw it, else the
   * rendezvous hash of its id over every known endpoint (live or not), so
   * that clients with the same endpoint list agree without talking. */
  private sessionTarget(sessionId: string, all: Endpoint[]): Endpoint | undefined {
    const pinned = this.sessionPins.get(sessionId);
    const found = all.find((e) => e.address.key === pinned);
    if (found !== undefined) {
      return found;
    }
    let best: Endpoint | undefined;
    let bestScore = -1;
    for (const e of all) {
      const score = sessionScore(sessionId, e.address.key);
      if (score > bestScore || (score === bestScore && best !== undefined && e.address.key < best.address.key)) {
        best = e;
        bestScore = score;
      }
    }
    return best;
  }

  private pick(candidates: Endpoint[], avoid: ReadonlySet<string> | undefined): Endpoint | undefined {
    const usable = candidates.filter((e) => e.state !== "dead");
    const preferred = usable.filter((e) => !(avoid?.has(e.address.key) ?? false));
    const pool = preferred.length > 0 ? preferred : usable;
    if (pool.length === 0) {
      return undefined;
    }
    // Live before idle (an idle one needs a connect that may fail), then
    // the fewest calls in flight, then round robin.
    const rank = (e: Endpoint): number => (e.state === "live" ? 0 : 1);
    const best = Math.min(...pool.map(rank));
    const ranked = pool.filter((e) => rank(e) === best);
    const fewest = Math.min(...ranked.map((e) => e.assigned));
    const ties = ranked.filter((e) => e.assigned === fewest);
    this.rr = (this.rr + 1) >>> 0;
    return ties[this.rr % ties.length];
  }

  private unreachableMessage(candidates: Endpoint[], sessionId: string | undefined, timeoutMs: number | undefined): string {
    const errors = this.groups.map((g) => g.lastError).filter((m) => m !== "");
    errors.push(...candidates.map((e) => e.lastError).filter((m) => m !== ""));
    const where =
      candidates.length > 0 ? candidates.map((e) => e.address.key).join(", ") : this.groups.map((g) => g.url.url).join(", ");
    const session = sessionId !== undefined && sessionId !== "" ? ` for session ${sessionId}` : "";
    const within = timeoutMs !== undefined ? ` within ${timeoutMs} ms (connectTimeoutMs)` : "";
    return `no endpoint reachable${session}${within} (${where})${errors.length > 0 ? `: ${errors.join("; ")}` : ""}; nothing was sent`;
  }

  private waitForChange(deadline: number, signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.waiters.delete(done);
        signal?.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(1, Math.min(WAIT_POLL_MS, deadline - performance.now())));
      this.waiters.add(done);
      signal?.addEventListener("abort", done, { once: true });
    });
  }

  private makeGroup(url: EndpointUrl): Group {
    const g: Group = { url, endpoints: new Map(), resolvedAt: -Infinity, resolving: null, lastError: "" };
    if (!needsResolution(url)) {
      const addr = addressOf(url, url.host);
      g.endpoints.set(addr.key, new Endpoint(addr, url.url, this));
      g.resolvedAt = Infinity;
    }
    return g;
  }

  /** Resolves host names again when stale (or now, when forced). The first
   * resolution is awaited; later ones run beside the calls. */
  private async refresh(force: boolean): Promise<void> {
    const now = performance.now();
    const waits: Promise<void>[] = [];
    for (const g of this.groups) {
      if (g.resolvedAt === Infinity || (!force && now - g.resolvedAt < this.options.resolveIntervalMs)) {
        continue;
      }
      if (force && now - g.resolvedAt < WAIT_POLL_MS * 5) {
        continue; // a dead fleet must not turn into a DNS flood
      }
      g.resolving ??= this.resolve(g).finally(() => {
        g.resolving = null;
      });
      if (g.endpoints.size === 0) {
        waits.push(g.resolving);
      }
    }
    await Promise.all(waits);
  }

  private async resolve(g: Group): Promise<void> {
    g.resolvedAt = performance.now();
    let ips: string[];
    try {
      ips = [...new Set(await this.resolver(g.url.host))];
      g.lastError = ips.length === 0 ? `${g.url.host}: no addresses` : "";
    } catch (err) {
      // Keep the addresses we had: a DNS hiccup must not empty the fleet.
      g.lastError = `resolving ${g.url.host}: ${(err as Error).message}`;
      return;
    }
    if (this.closed || ips.length === 0) {
      return;
    }
    const fresh = new Map<string, Endpoint>();
    for (const ip of ips) {
      const addr = addressOf(g.url, ip);
      fresh.set(addr.key, g.endpoints.get(addr.key) ?? new Endpoint(addr, g.url.url, this));
    }
    for (const [key, e] of g.endpoints) {
      if (!fresh.has(key)) {
        e.retire();
      }
    }
    g.endpoints = fresh;
    this.notify();
  }
}

/** 32-bit FNV-1a of a string's UTF-16 code units: stable across processes. */
/** FNV-1a 32 over the UTF-8 bytes of s. */
export function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (const b of Buffer.from(s, "utf8")) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/** The rendezvous score of an endpoint for a session, the same in every
 * client (C, Python, TypeScript; docs/CLIENTS.md): the highest score holds
 * the session, ties go to the smallest key. */
export function sessionScore(sessionId: string, key: string): number {
  return fnv1a(`${sessionId}\0${key}`);
}
