/**
 * `infra lint`: the infrastructure file alone, no network (DESIGN §12). The schema first, then the
 * rules a schema cannot say: unique host names and addresses, every role on at least one host,
 * an odd number (at least 3) of `nats` hosts for a replicated cluster, replicas within the `nats`
 * hosts. Every problem names its place as a JSON pointer and, when there is one, its host.
 */
import { readFileSync } from "node:fs";
import { parseDocument } from "yaml";
import { CodecError, check } from "../proto/mod.js";
import { INFRA_ROLES, type InfraFile, InfraFileSchema, hostsWithRole } from "./config.js";

/** One problem of the file. */
export interface InfraProblem {
  /** JSON pointer into the file (`/hosts/1/roles`); empty for the whole document. */
  readonly path: string;
  readonly message: string;
  /** The host the problem is about, when there is one. */
  readonly host?: string;
}

/** The result of reading and checking a file: the file when it is valid, the problems otherwise. */
export type LintResult =
  | { readonly ok: true; readonly file: InfraFile }
  | { readonly ok: false; readonly problems: InfraProblem[] };

const PINNED_MESSAGE =
  "the platform image must be pinned by digest: <repository>@sha256:<64 hex> or a local image id sha256:<64 hex> (a tag such as :latest can change under the hosts)";

/** The host named at `/hosts/<i>/...` of a document, when it has a name. */
function hostAt(doc: unknown, path: string): string | undefined {
  const m = /^\/hosts\/(\d+)(?:\/|$)/.exec(path);
  if (!m) return undefined;
  const hosts = (doc as { hosts?: unknown } | null)?.hosts;
  const host = Array.isArray(hosts) ? (hosts[Number(m[1])] as { name?: unknown } | undefined) : undefined;
  return typeof host?.name === "string" ? host.name : undefined;
}

/** A problem with its host and the host's name in front of the message. */
function problem(doc: unknown, path: string, message: string): InfraProblem {
  const host = hostAt(doc, path);
  if (host === undefined) return { path, message };
  return { path, message: `host '${host}': ${message}`, host };
}

/** Schema problems, in the words of the file. */
function schemaProblems(doc: unknown): InfraProblem[] {
  try {
    check(InfraFileSchema, doc, "slipway.infra.yaml");
    return [];
  } catch (e) {
    if (!(e instanceof CodecError)) throw e;
    return e.details.map((d) => {
      const message = d.path === "/image" && d.message !== "is required" ? PINNED_MESSAGE : d.message;
      return problem(doc, d.path, message);
    });
  }
}

/** The rules across fields, on a file that passed the schema. */
export function ruleProblems(file: InfraFile): InfraProblem[] {
  const out: InfraProblem[] = [];
  const seen = (field: "name" | "address") => {
    const first = new Map<string, number>();
    file.hosts.forEach((h, i) => {
      const value = h[field];
      const j = first.get(value);
      if (j === undefined) first.set(value, i);
      else
        out.push(
          problem(
            file,
            `/hosts/${i}/${field}`,
            `${field} '${value}' is already used by hosts/${j} ('${file.hosts[j]!.name}')`,
          ),
        );
    });
  };
  seen("name");
  seen("address");
  for (const role of INFRA_ROLES) {
    if (hostsWithRole(file, role).length === 0)
      out.push({
        path: "/hosts",
        message: `no host has the role '${role}': every role needs at least one host`,
      });
  }
  const nats = hostsWithRole(file, "nats").map((h) => h.name);
  if (nats.length > 0 && file.replicas > nats.length) {
    out.push({
      path: "/replicas",
      message: `replicas ${file.replicas} needs at least ${file.replicas} hosts with the role 'nats'; ${nats.length} have it (${nats.join(", ")})`,
    });
  }
  if (file.replicas > 1 && nats.length > 0 && (nats.length < 3 || nats.length % 2 === 0)) {
    out.push({
      path: "/hosts",
      message: `replicas ${file.replicas} needs an odd number of at least 3 hosts with the role 'nats' (a majority must survive one loss); ${nats.length} have it (${nats.join(", ")})`,
    });
  }
  return out;
}

/** Parses YAML text; a syntax error is one problem with its line and column. */
function parseYaml(text: string): { doc: unknown } | { problems: InfraProblem[] } {
  const parsed = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  if (parsed.errors.length > 0) {
    return {
      problems: parsed.errors.map((e) => {
        // the first line of a pretty message ends with "at line L, column C:"; the code frame follows
        const first = (e.message.split("\n")[0] ?? e.message).replace(/:$/, "");
        return { path: "", message: `not valid YAML: ${first}` };
      }),
    };
  }
  return { doc: parsed.toJS() as unknown };
}

/** Checks the text of an infrastructure file. */
export function lintInfraText(text: string): LintResult {
  const parsed = parseYaml(text);
  if ("problems" in parsed) return { ok: false, problems: parsed.problems };
  const schema = schemaProblems(parsed.doc);
  if (schema.length > 0) return { ok: false, problems: schema };
  const file = parsed.doc as InfraFile;
  const rules = ruleProblems(file);
  return rules.length > 0 ? { ok: false, problems: rules } : { ok: true, file };
}

/** The file could not be read at all. */
export class InfraFileError extends Error {
  override readonly name = "InfraFileError";
}

/** Reads and checks an infrastructure file. */
export function lintInfraFile(path: string): LintResult {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? "error";
    throw new InfraFileError(
      code === "ENOENT"
        ? `${path} does not exist: write the environment's slipway.infra.yaml (docs/infra.md), or name it with --file`
        : `${path} cannot be read (${code})`,
    );
  }
  return lintInfraText(text);
}
