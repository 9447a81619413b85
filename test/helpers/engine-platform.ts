import { dockerdMissing, startTestDockerd, type TestDockerd } from "./dockerd.js";
import { type PlatformContext, type PlatformPerFileOptions, type Stub, stopStub } from "./infra.js";
import { registryMissing, startTestRegistry, type TestRegistry } from "./registry.js";

/** A file's context with a private container engine and a registry beside its platform. */
export interface EngineContext extends PlatformContext {
  dockerd: TestDockerd & Stub;
  registry: TestRegistry & Stub;
}

/**
 * The {@link platformPerFile} options of a file whose platform drives a private dockerd (its own
 * network namespace) with Debian's registry beside it: both stubs, `DOCKER_HOST` set for the node
 * and put back after the file, containers reaching the platform at the engine's bridge address.
 * Spread it and add the file's own `extra` and `teardown`.
 */
export function enginePlatform<C extends EngineContext>(): Pick<
  PlatformPerFileOptions<C>,
  "stubs" | "processEnv" | "platform"
> {
  return {
    stubs: async (started) => {
      const missing = registryMissing();
      if (missing) throw new Error(missing);
      const engine = await startTestDockerd();
      if (!engine) throw new Error(`a private dockerd cannot run here: ${dockerdMissing()}`);
      const dockerd = started(stopStub(engine));
      const registry = started(stopStub(await startTestRegistry(dockerd.hostAddress)));
      return { dockerd, registry } as Partial<C> & Record<string, Stub>;
    },
    processEnv: ({ dockerd }) => ({ DOCKER_HOST: dockerd.host }),
    platform: ({ dockerd }) => ({ bridgeAddress: dockerd.hostAddress }),
  };
}
