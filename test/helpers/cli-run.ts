import { runCli } from "../../cli/mod.js";
import type { CliWriter } from "../../cli/mod.js";
import { controlAuth } from "./infra.js";

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

/**
 * Runs the real client in process against a platform's control plane, with the control token of a
 * platform this test process started in SLIPWAY_CONTROL_TOKEN (as the operator's CLI finds it on the
 * same machine) unless `env` says otherwise.
 */
export async function runSlipway(
  controlUrl: string,
  argv: string[],
  env: Record<string, string | undefined> = {},
): Promise<CliResult> {
  const stdout = writer();
  const stderr = writer();
  const token = controlAuth(controlUrl).authorization?.replace(/^Bearer /, "");
  const code = await runCli(argv, {
    env: {
      SLIPWAY_CONTROL_URL: controlUrl,
      SLIPWAY_ACTOR_ID: "e2e-builder",
      ...(token ? { SLIPWAY_CONTROL_TOKEN: token } : {}),
      ...env,
    },
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
