/**
 * Two ways to run the suite:
 * - `npm test` (and CI): the tests compiled by tsc into dist/test (setup --build makes them first,
 *   and again whenever a source changed), run by plain node. Loading the platform under tsx's loader
 *   costs every test process about two more seconds of CPU; over the suite that is minutes.
 * - `npx ava test/<path>.test.ts`: one file from its sources under tsx, without a build.
 * Child processes the tests start run compiled under npm test (test/helpers/repo.ts nodeArgs), else
 * from the sources under tsx.
 */
const compiled = process.env.SLIPWAY_TEST_COMPILED === "1";
// the suites that run alone (test/chaos: the cluster chaos suite, 6 to 9 minutes, and infra apply on
// three test hosts, about 4.5): `npm test` runs them after the rest, one file at a time
// (scripts/test.mjs), `npm run test:chaos` alone; a plain `ava` leaves them out
const chaos = process.env.SLIPWAY_TEST_CHAOS === "1";

export default {
  files: [
    ...(compiled ? ["dist/test/**/*.test.js"] : ["test/**/*.test.ts"]),
    ...(chaos ? [] : [compiled ? "!dist/test/chaos/**" : "!test/chaos/**"]),
  ],
  ...(compiled ? {} : { extensions: ["ts"], nodeArguments: ["--import=tsx"] }),
  workerThreads: false,
  timeout: "300s",
  concurrency: 2,
  serial: false,
  // apps the tests make install their packages from npm's cache (setup fetched them): no test
  // sends anything beyond loopback
  environmentVariables: { npm_config_offline: "true" },
};
