import { existsSync } from "node:fs";
import { createApp, configFromEnv } from "./app.js";

/**
 * Entry point: `npm start` (built) or `npm run dev` (watch mode). Listens on
 * `HOST`:`PORT` (default 127.0.0.1:3000; set `HOST=0.0.0.0` in a container).
 * A `.env` in the working directory is read first; variables already set win.
 */

if (existsSync(".env")) process.loadEnvFile(".env");

const { warnings, ...config } = configFromEnv(process.env);
for (const w of warnings) console.warn(`warning: ${w}`);

const port = Number(process.env.PORT || 3000);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`PORT must be a port number, got ${JSON.stringify(process.env.PORT)}`);
  process.exit(1);
}
const host = process.env.HOST || "127.0.0.1";

const server = createApp(config);
server.listen(port, host, () => {
  const addr = server.address();
  const bound = addr && typeof addr === "object" ? addr.port : port;
  console.log(`{{APP}} listening on http://${host.includes(":") ? `[${host}]` : host}:${bound}`);
});

function shutdown(signal: string): void {
  console.log(`${signal}: closing`);
  server.close(() => process.exit(0));
  server.closeIdleConnections();
  // Give in-flight requests a moment, then go anyway.
  setTimeout(() => process.exit(0), 10_000).unref();
}
process.once("SIGTERM", () => shutdown("SIGTERM"));
process.once("SIGINT", () => shutdown("SIGINT"));
