export default {
  files: ["test/**/*.test.ts"],
  extensions: ["ts"],
  nodeArguments: ["--import=tsx"],
  workerThreads: false,
  timeout: "120s",
  concurrency: 2,
  serial: false,
};
