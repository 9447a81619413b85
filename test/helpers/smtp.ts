import type { AddressInfo } from "node:net";
import { simpleParser, type ParsedMail } from "mailparser";
import { SMTPServer } from "smtp-server";

/**
 * A real SMTP server (`smtp-server`) on a loopback port for tests: what
 * arrives is parsed with `mailparser`. Plain SMTP (STARTTLS hidden: no
 * certificate here), AUTH PLAIN/LOGIN over it when `auth` is given (535 on a
 * wrong password), and `tempFailures`: the first n sends answered `451`.
 */

export interface ReceivedMail {
  envelope: { from: string; to: string[] };
  user: string | undefined;
  parsed: ParsedMail;
  raw: string;
}

export interface TestSmtp {
  readonly port: number;
  /** `smtp://[user:pass@]127.0.0.1:<port>` (with `from` when given). */
  url(o?: { user?: string; pass?: string; from?: string }): string;
  readonly received: ReceivedMail[];
  /** Every connection the server saw (a refused login and a retry count too). */
  readonly connections: () => number;
  /** Answer the next n messages `451 4.3.0 try again later`. */
  failNext(n: number): void;
  close(): Promise<void>;
}

export async function startTestSmtp(
  o: { auth?: { user: string; pass: string }; host?: string } = {},
): Promise<TestSmtp> {
  const received: ReceivedMail[] = [];
  let connections = 0;
  let failing = 0;
  const server = new SMTPServer({
    hideSTARTTLS: true,
    disabledCommands: o.auth ? [] : ["AUTH"],
    authOptional: !o.auth,
    allowInsecureAuth: true,
    logger: false,
    onConnect(_session, cb) {
      connections++;
      cb();
    },
    onAuth(auth, _session, cb) {
      if (o.auth && auth.username === o.auth.user && auth.password === o.auth.pass)
        return cb(null, { user: auth.username });
      const e = Object.assign(new Error("Authentication failed: bad user or password"), {
        responseCode: 535,
      });
      cb(e);
    },
    onData(stream, session, cb) {
      const chunks: Buffer[] = [];
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("end", () => {
        if (failing > 0) {
          failing--;
          return cb(Object.assign(new Error("4.3.0 try again later"), { responseCode: 451 }));
        }
        const raw = Buffer.concat(chunks).toString("utf8");
        simpleParser(raw)
          .then((parsed) => {
            received.push({
              envelope: {
                from: session.envelope.mailFrom ? session.envelope.mailFrom.address : "",
                to: session.envelope.rcptTo.map((r) => r.address),
              },
              user: typeof session.user === "string" ? session.user : undefined,
              parsed,
              raw,
            });
            cb(null, `OK: queued as Q${received.length}`);
          })
          .catch((e: Error) => cb(e));
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    // another address only for a private engine's containers (its bridge address, test/helpers/dockerd.ts)
    server.listen(0, o.host ?? "127.0.0.1", () => resolve());
  });
  const port = (server.server.address() as AddressInfo).port;
  return {
    port,
    url({ user, pass, from } = {}) {
      const cred = user
        ? `${encodeURIComponent(user)}${pass !== undefined ? `:${encodeURIComponent(pass)}` : ""}@`
        : "";
      return `smtp://${cred}127.0.0.1:${port}${from ? `?from=${encodeURIComponent(from)}` : ""}`;
    },
    received,
    connections: () => connections,
    failNext(n) {
      failing = n;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
