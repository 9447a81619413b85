/** `infra lint`: the file alone, no network, no state (infra/lint.ts has the rules). */
import { INFRA_ROLES, hostsWithRole } from "./config.js";
import { type InfraContext, type InfraOutcome, loadInfraFile, resultOutcome, shownPath } from "./outcome.js";

export function runLint(ctx: InfraContext): InfraOutcome {
  const loaded = loadInfraFile(ctx);
  if (!loaded.ok) return loaded.outcome;
  const { file, path } = loaded;
  const roles = Object.fromEntries(INFRA_ROLES.map((r) => [r, hostsWithRole(file, r).map((h) => h.name)]));
  const result = {
    file: path,
    environment: file.environment.name,
    production: file.environment.production,
    replicas: file.replicas,
    image: file.image,
    hosts: file.hosts.map((h) => ({ name: h.name, address: h.address, roles: h.roles })),
    roles,
    problems: [],
  };
  const lines = [
    `${shownPath(ctx.cwd, path)}: no problems`,
    `environment ${file.environment.name}${file.environment.production ? " (production)" : ""}, ${file.hosts.length} hosts, replicas ${file.replicas}`,
    ...INFRA_ROLES.map((r) => `${r}: ${roles[r]?.join(", ")}`),
    `image ${file.image}`,
  ];
  return resultOutcome("lint", true, result, lines);
}
