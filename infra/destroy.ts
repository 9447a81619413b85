/**
 * `infra destroy`: not built (removing every container and volume the infra made comes with
 * apply). Its refusals are: production (the file's `environment.production: true`, or an
 * `--env` named production or prod, checked by the CLI) needs `--i-know-this-is-prod`, and the
 * operator types the environment's name unless `--yes`. After them it answers not_implemented:
 * nothing is destroyed.
 */
import { type InfraContext, type InfraOutcome, errorOutcome, loadInfraFile } from "./outcome.js";

export async function runDestroy(ctx: InfraContext): Promise<InfraOutcome> {
  const loaded = loadInfraFile(ctx);
  if (!loaded.ok) return loaded.outcome;
  const env = loaded.file.environment;
  if (env.production && ctx.values.i_know_this_is_prod !== true)
    return errorOutcome(
      "refused",
      `infra destroy refuses to act on production (environment '${env.name}' has production: true in ${loaded.path}) unless --i-know-this-is-prod is given`,
      "usage",
    );
  if (ctx.values.yes !== true) {
    const answer = ctx.confirm
      ? await ctx.confirm(`Type the environment's name (${env.name}) to destroy it: `)
      : undefined;
    if (answer === undefined)
      return errorOutcome(
        "refused",
        `infra destroy asks for the environment's name (${env.name}) on a terminal; without one, pass --yes`,
        "usage",
      );
    if (answer.trim() !== env.name)
      return errorOutcome(
        "refused",
        `infra destroy not confirmed (typed '${answer.trim()}', not '${env.name}')`,
        "usage",
      );
  }
  return errorOutcome(
    "not_implemented",
    `infra destroy is not built in this client: removing the containers and volumes of environment '${env.name}' comes with apply; nothing was done`,
    "unavailable",
  );
}
