export default {
  files: ["test/**/*.test.ts"],
  extensions: ["ts"],
  nodeArguments: ["--import=tsx"],
  workerThreads: false,
  timeout: "300s",
  concurrency: 2,
  serial: false,
  // apps the tests make install their packages from npm's cache (setup fetched them): no test
  // sends anything beyond loopback
  environmentVariables: { npm_config_offline: "true" },
};
