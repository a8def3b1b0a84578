/* connection.ts: one SP connection of a REQ peer to a REP, over node:net or
 * node:tls, carrying many requests at once (nng's REQ contexts do the same:
 * each request has its own id, the reply echoes it).
 *
 * What this layer must never do: send a request twice. It has no resend
 * timer and no queue that outlives the connection; a request whose bytes
 * were handed to the socket is failed with "closed" when the connection
 * goes, and the caller reports that as UNKNOWN (it may have run). */
import * as net from "node:net";
import * as tls from "node:tls";

import { type Address, framingOf } from "./address.js";
import {
  checkPeerHeader,
  encodeRequest,
  FrameDecoder,
  type Framing,
  SP_HEADER_BYTES,
  SP_PROTOCOL_REP,
  SP_PROTOCOL_REQ,
  spHeader,
  splitReply,
  WireError,
} from "./wire.js";

/** Why a request got no reply. `sent` says whether its bytes had been handed
 * to the socket: only then may the server have run it. */
export class TransportError extends Error {
  override name = "TransportError";
  constructor(
    readonly kind: "connect" | "closed" | "timeout" | "aborted",
    readonly sent: boolean,
    message: string,
  ) {
    super(message);
  }
}

export interface ConnectOptions {
  connectTimeoutMs: number;
  /** Cap on an incoming message (a larger one closes the connection). */
  maxReplyBytes: number;
  /** Passed to tls.connect for tls+tcp:// (ca, cert, key, servername...). */
  tls?: tls.ConnectionOptions | undefined;
}

interface Pending {
  resolve: (payload: Buffer) => void;
  reject: (err: TransportError) => void;
  timer: NodeJS.Timeout;
  cleanup: () => void;
}

const FIRST_ID = 0x80000000;

export class SpConnection {
  private readonly pending = new Map<number, Pending>();
  private readonly decoder: FrameDecoder;
  private nextId = FIRST_ID + Math.floor(Math.random() * 0x7fffffff);
  private closeReason: Error | null = null;
  private isClosed = false;
  /** Called once when the connection ends; `hadPending` when calls died with it. */
  onClose: (reason: Error | null, hadPending: boolean) => void = () => {};

  private constructor(
    private readonly sock: net.Socket,
    private readonly framing: Framing,
    maxReplyBytes: number,
    leftover: Buffer,
    readonly address: Address,
  ) {
    this.decoder = new FrameDecoder(framing, maxReplyBytes);
    sock.on("data", (chunk: Buffer) => this.onData(chunk));
    sock.on("error", (err: Error) => {
      this.closeReason ??= err;
    });
    sock.on("close", () => this.onSocketClose());
    sock.unref(); // an idle client must not keep the process alive
    if (leftover.length > 0) {
      this.onData(leftover);
    }
  }

  /** Connects, exchanges SP headers and checks the peer is a REP. */
  static connect(address: Address, opts: ConnectOptions): Promise<SpConnection> {
    return new Promise((resolve, reject) => {
      const sock = openSocket(address, opts);
      let got = Buffer.alloc(0);
      const fail = (err: Error): void => {
        clearTimeout(timer);
        sock.destroy();
        // OpenSSL's messages (a TLS alert from the server) end in a newline.
        const why = err.message.trim().replace(/\s*\n\s*/g, " ");
        reject(new TransportError("connect", false, `${address.key}: ${why}`));
      };
      const timer = setTimeout(
        () => fail(new Error(`no SP handshake within ${opts.connectTimeoutMs} ms`)),
        opts.connectTimeoutMs,
      );
      const onData = (chunk: Buffer): void => {
        got = Buffer.concat([got, chunk]);
        if (got.length < SP_HEADER_BYTES) {
          return;
        }
        try {
          checkPeerHeader(got.subarray(0, SP_HEADER_BYTES), SP_PROTOCOL_REP);
        } catch (err) {
          fail(err as Error);
          return;
        }
        clearTimeout(timer);
        sock.off("data", onData);
        sock.off("error", fail);
        sock.off("close", onEarlyClose);
        const leftover = got.subarray(SP_HEADER_BYTES);
        resolve(new SpConnection(sock, framingOf(address.transport), opts.maxReplyBytes, leftover, address));
      };
      const onEarlyClose = (): void => fail(new Error("connection closed during the SP handshake"));
      sock.on("data", onData);
      sock.on("error", fail);
      sock.on("close", onEarlyClose);
      sock.once(address.transport === "tls" ? "secureConnect" : "connect", () => {
        sock.write(spHeader(SP_PROTOCOL_REQ));
      });
    });
  }

  get inFlight(): number {
    return this.pending.size;
  }

  /** Closed, or the peer has ended it (its FIN arrived, e.g. the server's
   * idle timeout): no request may be sent on it any more. */
  get closed(): boolean {
    return this.isClosed || this.sock.readableEnded || !this.sock.writable;
  }

  /** Sends one request and waits for its reply's payload. */
  request(payload: Uint8Array, timeoutMs: number, signal?: AbortSignal): Promise<Buffer> {
    if (this.closed) {
      return Promise.reject(new TransportError("connect", false, `${this.address.key}: connection closed`));
    }
    if (signal?.aborted) {
      return Promise.reject(new TransportError("aborted", false, "aborted before the request was sent"));
    }
    const id = this.allocateId();
    const frame = encodeRequest(this.framing, id, payload);
    return new Promise((resolve, reject) => {
      const onAbort = (): void =>
        this.settle(id, new TransportError("aborted", true, "abandoned by the caller after the request was sent"));
      const timer = setTimeout(
        () => this.settle(id, new TransportError("timeout", true, `no reply within ${timeoutMs} ms`)),
        timeoutMs,
      );
      signal?.addEventListener("abort", onAbort, { once: true });
      const cleanup = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      };
      this.pending.set(id, { resolve, reject, timer, cleanup });
      this.sock.ref();
      this.sock.write(frame);
    });
  }

  close(): void {
    this.sock.destroy();
  }

  private allocateId(): number {
    // 2^31 ids: a collision with a pending one needs 2^31 calls in flight.
    do {
      this.nextId = this.nextId >= 0xffffffff ? FIRST_ID : this.nextId + 1;
    } while (this.pending.has(this.nextId));
    return this.nextId;
  }

  /** Ends one pending request with a reply payload or an error. */
  private settle(id: number, outcome: Buffer | TransportError): void {
    const p = this.pending.get(id);
    if (p === undefined) {
      return;
    }
    this.pending.delete(id);
    p.cleanup();
    if (this.pending.size === 0 && !this.isClosed) {
      this.sock.unref();
    }
    if (outcome instanceof TransportError) {
      p.reject(outcome);
    } else {
      p.resolve(outcome);
    }
  }

  private onData(chunk: Buffer): void {
    let messages: Buffer[];
    try {
      messages = this.decoder.push(chunk);
      for (const body of messages) {
        const { requestId, payload } = splitReply(body);
        // An unknown id is a reply to a call that timed out or was
        // abandoned here: dropped, as nng's REQ drops it.
        this.settle(requestId, payload);
      }
    } catch (err) {
      this.closeReason = err instanceof WireError ? err : new WireError(String(err));
      this.sock.destroy();
    }
  }

  private onSocketClose(): void {
    if (this.isClosed) {
      return;
    }
    this.isClosed = true;
    const hadPending = this.pending.size > 0;
    const why = this.closeReason?.message ?? "closed by the peer";
    for (const id of [...this.pending.keys()]) {
      this.settle(id, new TransportError("closed", true, `connection to ${this.address.key} lost: ${why}`));
    }
    this.onClose(this.closeReason, hadPending);
  }
}

function openSocket(address: Address, opts: ConnectOptions): net.Socket {
  if (address.transport === "ipc") {
    return net.connect({ path: address.path });
  }
  if (address.transport === "tls") {
    // The URL's name, not the address it resolved to, is what the
    // certificate names (SNI and the identity check both use servername).
    const fromUrl = net.isIP(address.servername) === 0 ? address.servername : undefined;
    const servername = opts.tls?.servername ?? fromUrl;
    const sock = tls.connect({ ...opts.tls, host: address.host, port: address.port, servername });
    sock.setNoDelay(true);
    return sock;
  }
  // Small requests and replies: Nagle would add up to 40 ms (nng sets
  // TCP_NODELAY too).
  return net.connect({ host: address.host, port: address.port, noDelay: true });
}
