import type { Dirent } from "node:fs";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import type { TaskContext, TaskResult, TaskSpec } from "./types.js";
import {
  describeModelConfig,
  isModelError,
  modelConfigFromEnv,
  NO_MODEL_MESSAGE,
  PlanSchema,
  structuredCall,
  type ModelConfig,
  type Plan,
  type StructuredResult,
} from "../../effects/mod.js";
import type { AppRecord } from "../../proto/mod.js";

/** Most workspace paths listed in the prompt. */
export const PLAN_MAX_PATHS = 200;
/** Output token budget of a plan. */
export const PLAN_MAX_TOKENS = 8192;
/** Directories never listed (dependencies, build output, VCS data, caches). */
const SKIP_DIRS = new Set(["node_modules", "dist", ".git", "coverage", ".next", ".turbo", ".cache"]);

/** The workspace's file paths (relative, `/`-separated), breadth first, at most `max`. */
export async function listWorkspace(
  root: string,
  max = PLAN_MAX_PATHS,
): Promise<{ paths: string[]; truncated: boolean }> {
  const paths: string[] = [];
  let queue: string[] = [""];
  while (queue.length > 0) {
    const next: string[] = [];
    for (const dir of queue) {
      let entries: Dirent[];
      try {
        entries = await readdir(join(root, dir), { withFileTypes: true });
      } catch {
        continue; // missing or unreadable: nothing to list
      }
      entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
      for (const e of entries) {
        const rel = dir ? `${dir}/${e.name}` : e.name;
        if (e.isDirectory()) {
          if (!SKIP_DIRS.has(e.name)) next.push(rel);
        } else if (e.isFile() || e.isSymbolicLink()) {
          if (paths.length >= max) return { paths: paths.sort(), truncated: true };
          paths.push(rel);
        }
      }
    }
    queue = next;
  }
  return { paths: paths.sort(), truncated: false };
}

const PLAN_SYSTEM = [
  "You plan features for applications hosted on Slipway, a platform that builds, tests and runs small web applications (Node.js).",
  "You are given the application's name and framework, the list of its workspace files (names only), and the goal of the feature.",
  "Write a plan a developer can follow: a short summary, ordered steps, the files to create, modify or delete (paths relative to the workspace root), the risks or open questions, and the tests that show the feature works.",
  "Stay within the goal; prefer the files and conventions the workspace already has.",
  "Answer only by calling the tool submit_plan once.",
].join("\n");

/** The user prompt of a plan: app, workspace file names, goal. No file contents and no secret values. */
export function planPrompt(
  app: Pick<AppRecord, "name" | "platform" | "framework">,
  files: { paths: string[]; truncated: boolean },
  goal: string,
): string {
  const listing = files.paths.length
    ? files.paths.map((p) => `- ${p}`).join("\n")
    : "(the workspace is empty)";
  const note = files.truncated ? `\n(first ${files.paths.length} paths only)` : "";
  return [
    `Application: ${app.name} (platform ${app.platform}, framework ${app.framework})`,
    "",
    `Workspace files (${[...SKIP_DIRS].join(", ")} not listed):`,
    listing + note,
    "",
    "Goal of the feature:",
    "<goal>",
    goal,
    "</goal>",
  ].join("\n");
}

function planRun(app: AppRecord, goal: string, cfg: ModelConfig): (t: TaskContext) => Promise<TaskResult> {
  return async (t) => {
    const files = await listWorkspace(join(t.workspaceRoot, app.workspace));
    const where = describeModelConfig(cfg);
    await t.log(
      `asking ${where.model} at ${where.base_url} for a plan (${files.paths.length}${files.truncated ? "+" : ""} workspace paths in the prompt)`,
    );
    let answer: StructuredResult<Plan>;
    try {
      answer = await structuredCall(cfg, {
        system: PLAN_SYSTEM,
        prompt: planPrompt(app, files, goal),
        toolName: "submit_plan",
        toolDescription: "Submit the feature plan: summary, ordered steps, files, risks and tests.",
        schema: PlanSchema,
        maxTokens: PLAN_MAX_TOKENS,
        signal: t.signal,
      });
    } catch (e) {
      if (!isModelError(e) || t.signal.aborted) throw e;
      await t.log(`plan refused: ${e.message}`, "stderr");
      return {
        status: "failed",
        fields: { error: e.message, error_code: e.code },
        data: { error: e.message },
      };
    }
    const plan = answer.value;
    const usage = answer.usage;
    await t.log(
      `plan: ${plan.steps.length} steps, ${plan.files.length} files, ${plan.risks.length} risks, ${plan.tests.length} tests (${usage.input_tokens} tokens in, ${usage.output_tokens} out)`,
    );
    return {
      status: "succeeded",
      fields: {
        summary: plan.summary,
        steps: plan.steps,
        files: plan.files,
        risks: plan.risks,
        tests: plan.tests,
        model: answer.model,
        usage,
      },
      data: {
        model: answer.model,
        steps: plan.steps.length,
        files: plan.files.length,
        risks: plan.risks.length,
        tests: plan.tests.length,
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
      },
    };
  };
}

/**
 * generate-feature-plan's long work: the workspace's file names and the goal
 * to the model, its answer checked against the Plan schema. The model's
 * configuration is read when the task starts (`config`, the environment by
 * default; docs/models.md).
 */
export function planTask(
  app: AppRecord,
  goal: string,
  config: () => ModelConfig | undefined = () => modelConfigFromEnv(process.env),
): TaskSpec {
  return {
    onSuccess: "PlanCreated",
    run: async (t) => {
      const cfg = config();
      if (!cfg)
        return { status: "failed", fields: { error: NO_MODEL_MESSAGE }, data: { error: NO_MODEL_MESSAGE } };
      return planRun(app, goal, cfg)(t);
    },
  };
}
