import { runCli } from "../../cli/mod.js";
import type { CliWriter } from "../../cli/mod.js";

/** What one in-process run of the `slipway` client printed and how it exited. */
export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout parsed as JSON (for `--json` runs), else undefined. */
  json: any;
}

function writer(): CliWriter & { text: () => string } {
  let text = "";
  return {
    write(chunk: string | Uint8Array) {
      text += typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8");
      return true;
    },
    once() {},
    text: () => text,
  } as unknown as CliWriter & { text: () => string };
}

/** Runs the real client in process against a platform's control plane. */
export async function runSlipway(
  controlUrl: string,
  argv: string[],
  env: Record<string, string | undefined> = {},
): Promise<CliResult> {
  const stdout = writer();
  const stderr = writer();
  const code = await runCli(argv, {
    env: { SLIPWAY_CONTROL_URL: controlUrl, SLIPWAY_ACTOR_ID: "e2e-builder", ...env },
    stdout,
    stderr,
  });
  let json: any;
  try {
    json = JSON.parse(stdout.text());
  } catch {
    json = undefined;
  }
  return { code, stdout: stdout.text(), stderr: stderr.text(), json };
}
