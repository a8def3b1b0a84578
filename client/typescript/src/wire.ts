/* wire.ts: nng's Scalability Protocols wire format, the bytes only.
 *
 * No maintained nng binding exists for Node, so this is the client side of
 * what libnng puts on a stream (nng src/sp/transport/{tcp,ipc}, the
 * sp-tcp-mapping RFC, and the REQ/REP protocol's backtrace):
 *
 *   connection start, both sides: 00 'S' 'P' 00 <protocol id: u16 BE> 00 00
 *     (REQ = 0x30, its peer REP = 0x31)
 *   each message, tcp and tls+tcp: <length: u64 BE> <body>
 *   each message, ipc:             01 <length: u64 BE> <body>
 *   a REQ body:   <request id: u32 BE, high bit set> <payload>
 *   a REP body:   the backtrace it received, then the reply payload; with no
 *                 device between us that is our own request id.
 *
 * Everything here comes from the network: every length, type byte and id is
 * checked before it is used, and nothing allocates on a length the peer
 * only claims (the body is collected as it arrives). Never does I/O. */

export const SP_PROTOCOL_REQ = 0x30;
export const SP_PROTOCOL_REP = 0x31;
export const SP_HEADER_BYTES = 8;
/* nng's IPC transport marks user messages with type 1 (0 is reserved). */
const IPC_MESSAGE_TYPE = 0x01;
const REQUEST_ID_HIGH_BIT = 0x80000000;

export type Framing = "tcp" | "ipc";

/** A peer broke the wire protocol: the connection must be closed. */
export class WireError extends Error {
  override name = "WireError";
}

/** The 8-byte SP header this side sends: \0SP\0, protocol, 2 zero bytes. */
export function spHeader(protocol: number): Buffer {
  const b = Buffer.alloc(SP_HEADER_BYTES);
  b[1] = 0x53; // 'S'
  b[2] = 0x50; // 'P'
  b.writeUInt16BE(protocol, 4);
  return b;
}

/** Checks the peer's SP header: the magic, the reserved bytes, and that the
 * peer speaks `wantProtocol` (a REQ must only talk to a REP). */
export function checkPeerHeader(head: Uint8Array, wantProtocol: number): void {
  if (head.length !== SP_HEADER_BYTES) {
    throw new WireError(`SP header of ${head.length} bytes, want ${SP_HEADER_BYTES}`);
  }
  if (head[0] !== 0 || head[1] !== 0x53 || head[2] !== 0x50 || head[3] !== 0) {
    throw new WireError("the peer did not send an SP header (not an nng endpoint?)");
  }
  if (head[6] !== 0 || head[7] !== 0) {
    throw new WireError("the peer's SP header has non-zero reserved bytes");
  }
  const protocol = (head[4]! << 8) | head[5]!;
  if (protocol !== wantProtocol) {
    throw new WireError(
      `the peer speaks SP protocol 0x${protocol.toString(16)}, want 0x${wantProtocol.toString(16)} (REP)`,
    );
  }
}

function frameHeaderBytes(framing: Framing): number {
  return framing === "ipc" ? 9 : 8;
}

/** One REQ message as it goes on the wire: framing, request id, payload. */
export function encodeRequest(framing: Framing, requestId: number, payload: Uint8Array): Buffer {
  if (!isRequestId(requestId)) {
    throw new RangeError(`request id 0x${requestId.toString(16)} lacks the high bit`);
  }
  const head = frameHeaderBytes(framing);
  const out = Buffer.allocUnsafe(head + 4 + payload.length);
  let at = 0;
  if (framing === "ipc") {
    out[at++] = IPC_MESSAGE_TYPE;
  }
  out.writeBigUInt64BE(BigInt(4 + payload.length), at);
  at += 8;
  out.writeUInt32BE(requestId, at);
  out.set(payload, at + 4);
  return out;
}

export function isRequestId(id: number): boolean {
  return Number.isInteger(id) && id >= REQUEST_ID_HIGH_BIT && id <= 0xffffffff;
}

/** Splits a REP message body into the request id it answers and the reply.
 * A body shorter than an id, or whose first word lacks the high bit (a
 * backtrace we never sent: we talk to the REP directly), is a protocol
 * violation. */
export function splitReply(body: Buffer): { requestId: number; payload: Buffer } {
  if (body.length < 4) {
    throw new WireError(`a reply of ${body.length} bytes has no request id`);
  }
  const requestId = body.readUInt32BE(0);
  if (!isRequestId(requestId)) {
    throw new WireError(`a reply's request id 0x${requestId.toString(16)} lacks the high bit`);
  }
  return { requestId, payload: body.subarray(4) };
}

/** Turns the byte stream after the SP header into whole messages. Throws
 * WireError on a bad IPC type byte or a length over maxBytes; the caller
 * closes the connection then (nng does the same). */
export class FrameDecoder {
  private readonly head: Buffer;
  private headHave = 0;
  private bodyWant = -1; // -1: reading a header
  private bodyChunks: Buffer[] = [];
  private bodyHave = 0;

  constructor(
    private readonly framing: Framing,
    private readonly maxBytes: number,
  ) {
    this.head = Buffer.alloc(frameHeaderBytes(framing));
  }

  /** Feeds bytes; returns the messages they completed, in order. */
  push(chunk: Buffer): Buffer[] {
    const out: Buffer[] = [];
    let at = 0;
    while (at < chunk.length) {
      if (this.bodyWant < 0) {
        at = this.readHead(chunk, at);
        if (this.bodyWant === 0) {
          out.push(this.finishBody());
        }
      } else {
        const take = Math.min(this.bodyWant - this.bodyHave, chunk.length - at);
        this.bodyChunks.push(chunk.subarray(at, at + take));
        this.bodyHave += take;
        at += take;
        if (this.bodyHave === this.bodyWant) {
          out.push(this.finishBody());
        }
      }
    }
    return out;
  }

  /** True when no partial message is buffered. */
  get idle(): boolean {
    return this.bodyWant < 0 && this.headHave === 0;
  }

  private readHead(chunk: Buffer, at: number): number {
    const take = Math.min(this.head.length - this.headHave, chunk.length - at);
    chunk.copy(this.head, this.headHave, at, at + take);
    this.headHave += take;
    if (this.headHave === this.head.length) {
      this.bodyWant = this.parseHead();
    }
    return at + take;
  }

  private parseHead(): number {
    let at = 0;
    if (this.framing === "ipc") {
      if (this.head[0] !== IPC_MESSAGE_TYPE) {
        throw new WireError(`IPC message type ${this.head[0]}, want ${IPC_MESSAGE_TYPE}`);
      }
      at = 1;
    }
    const len = this.head.readBigUInt64BE(at);
    if (len > BigInt(this.maxBytes)) {
      throw new WireError(`a message of ${len} bytes is over the cap of ${this.maxBytes}`);
    }
    return Number(len);
  }

  private finishBody(): Buffer {
    const body =
      this.bodyChunks.length === 1 ? this.bodyChunks[0]! : Buffer.concat(this.bodyChunks, this.bodyHave);
    this.bodyChunks = [];
    this.bodyHave = 0;
    this.bodyWant = -1;
    this.headHave = 0;
    return body;
  }
}
