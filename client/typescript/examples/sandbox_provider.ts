/* sandbox_provider.ts: a SandboxProvider as a learning platform writes it
 * on top of @sandboxd/client: one method, run(), that takes a learner's
 * program and returns what the page shows.
 *
 *   npm run build && node dist/examples/sandbox_provider.js [ENDPOINT...]
 *
 * (default endpoint tcp://127.0.0.1:7878, sandboxd's default). In an
 * application, import { Client } from "@sandboxd/client" instead. */
import { Client, type KilledBy, SandboxError } from "../src/index.js";

export interface RunRequest {
  code: string;
  stdin?: string;
  timeoutMs?: number;
  memoryMb?: number;
}

export interface RunOutcome {
  stdout: string;
  stderr: string;
  exitCode: number;
  killedBy: KilledBy;
  durationMs: number;
}

export class SandboxProvider {
  private readonly client: Client;

  constructor(endpoints: string | string[]) {
    this.client = new Client(endpoints);
  }

  /** Runs a learner's program. A program that fails, times out or runs out
   * of memory is a normal outcome (killedBy, exitCode); only a call that
   * could not be made throws (a SandboxError: its codeName says why, and
   * mayHaveRun whether the program may have run anyway). */
  async run({ code, stdin, timeoutMs, memoryMb }: RunRequest): Promise<RunOutcome> {
    const r = await this.client.runCode({
      code,
      stdin: stdin ?? "",
      limits: {
        timeoutMs: timeoutMs ?? 0,
        memoryBytes: memoryMb !== undefined ? memoryMb * 1024 * 1024 : 0,
      },
    });
    return {
      stdout: r.stdoutText,
      stderr: r.stderrText,
      exitCode: r.exitCode,
      killedBy: r.killedBy,
      durationMs: r.wallTimeMs,
    };
  }

  close(): void {
    this.client.close();
  }
}

async function main(): Promise<void> {
  const endpoints = process.argv.length > 2 ? process.argv.slice(2) : ["tcp://127.0.0.1:7878"];
  const provider = new SandboxProvider(endpoints);
  try {
    const runs: RunRequest[] = [
      { code: 'print("hello from the sandbox")' },
      { code: "while True:\n    pass", timeoutMs: 1000 },
      { code: "print(input()[::-1])", stdin: "hello\n", memoryMb: 128 },
    ];
    for (const req of runs) {
      console.log(JSON.stringify(await provider.run(req)));
    }
  } catch (err) {
    if (err instanceof SandboxError) {
      console.error(`sandbox call failed: ${err.message} (may have run: ${err.mayHaveRun})`);
      process.exitCode = 1;
      return;
    }
    throw err;
  } finally {
    provider.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  await main();
}
