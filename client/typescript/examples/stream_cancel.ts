/* stream_cancel.ts: a streaming run with cancel, as a web back end or an
 * agent writes it on top of @sandboxd/client: a long program's output is
 * shown line by line as it prints, and the run is cancelled once enough
 * was seen (a user pressing "stop", an agent that has its answer).
 *
 *   npm run build && node dist/examples/stream_cancel.js [ENDPOINT] [LINES]
 *
 * (default endpoint tcp://127.0.0.1:7878, sandboxd's default; LINES, the
 * lines read before cancelling, 3). Prints one JSON line per output line as
 * it arrives, then one for the run's end: killedBy "cancelled", and how
 * many lines the program had printed. In an application, import { Client }
 * from "@sandboxd/client" instead. Run by client_ts_stream. */
import { Client } from "../src/index.js";

const endpoint = process.argv[2] ?? "tcp://127.0.0.1:7878";
const wanted = Number(process.argv[3] ?? "3");

// A program that would print for 50 s: one numbered line every 100 ms.
const code = `
import time
for i in range(500):
    print("line", i, flush=True)
    time.sleep(0.1)
`;

const client = new Client(endpoint);
try {
  const run = client.stream({ code, limits: { timeoutMs: 60000 } });
  let seen = 0;
  let partial = "";
  const started = Date.now();
  reading: for await (const chunk of run.text()) {
    const lines = (partial + chunk.text).split("\n");
    partial = lines.pop()!;
    for (const line of lines) {
      console.log(JSON.stringify({ stream: chunk.stream, line, ms: Date.now() - started }));
      if (++seen >= wanted) {
        // Leaving the loop cancels the run (CancelRun) and waits until
        // the server says it has ended; run.cancel() does the same.
        break reading;
      }
    }
  }
  const r = await run.result;
  console.log(JSON.stringify({
    end: true,
    runId: r.runId,
    killedBy: r.killedBy,
    linesPrinted: r.stdoutText.split("\n").filter((l) => l !== "").length,
    wallTimeMs: r.wallTimeMs,
  }));
} finally {
  client.close();
}
