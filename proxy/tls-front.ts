import { createServer as createHttpsServer, type Server as HttpsServer } from "node:https";
import { createServer as createNetServer, type Server as NetServer, type Socket } from "node:net";
import type { CertificateStore } from "./certificates.js";
import { INCOMPLETE, MAX_HELLO_BYTES, serverNameOf } from "./client-hello.js";
import type { Front } from "./front.js";

/** A client must send its ClientHello within this. */
const HELLO_TIMEOUT_MS = 10_000;

/** No certificate for the name a client asked for: the handshake is refused. */
export class NoCertificateError extends Error {
  override readonly name = "NoCertificateError";
}

export interface TlsFrontOptions {
  front: Front;
  certs: CertificateStore;
  /** Whether a host requires a client certificate (its route has `client_ca_pem`). */
  mtls: (host: string) => boolean;
  log: (msg: string) => void;
}

/**
 * The HTTPS side: one listening socket; each connection's ClientHello is read first (its SNI) and
 * the connection handed to one of two node:https servers that never listen themselves: one for
 * hosts that require a client certificate (`requestCert`, `rejectUnauthorized`: a client without a
 * certificate from the host's CA fails the handshake), one for the others (no certificate asked
 * for, so browsers never prompt). Both pick the host's certificate by SNI; a name without a
 * certificate gets no handshake at all.
 */
export class TlsFront {
  readonly listener: NetServer;
  private readonly plain: HttpsServer;
  private readonly mutual: HttpsServer;
  private readonly o: TlsFrontOptions;
  private readonly sockets = new Set<Socket>();

  constructor(o: TlsFrontOptions) {
    this.o = o;
    const sni = (name: string, cb: (err: Error | null, ctx?: import("node:tls").SecureContext) => void) => {
      try {
        const ctx = o.certs.context(name.toLowerCase());
        if (ctx) cb(null, ctx);
        else cb(new NoCertificateError(`no certificate for ${name}`));
      } catch (e) {
        cb(e as Error);
      }
    };
    const common = { SNICallback: sni, keepAliveTimeout: 5000 };
    this.plain = createHttpsServer({ ...common });
    this.mutual = createHttpsServer({ ...common, requestCert: true, rejectUnauthorized: true });
    for (const s of [this.plain, this.mutual]) {
      s.on("request", o.front.request("https"));
      s.on("upgrade", o.front.upgrade("https"));
      s.on("connect", o.front.connect());
      s.on("tlsClientError", (_e, socket) => socket.destroy());
      s.on("clientError", (_e, socket) => socket.destroy());
      // connections come from our listener, not theirs: start node's connection tracking
      // (header and request timeouts, closeAllConnections) as a listening server would
      s.emit("listening");
    }
    this.listener = createNetServer({ pauseOnConnect: false }, (socket) => this.accept(socket));
    this.listener.on("error", (e) => o.log(`proxy: https listener: ${String(e)}`));
  }

  /** Reads the ClientHello's server name, then hands the connection to the right server. */
  private accept(socket: Socket): void {
    this.sockets.add(socket);
    socket.once("close", () => this.sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    let buf: Buffer = Buffer.alloc(0);
    const timer = setTimeout(() => socket.destroy(), HELLO_TIMEOUT_MS);
    const onData = (chunk: Buffer) => {
      try {
        buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
        const name = serverNameOf(buf);
        if (name === INCOMPLETE && buf.length < MAX_HELLO_BYTES) return;
        clearTimeout(timer);
        socket.removeListener("data", onData);
        socket.pause();
        socket.unshift(buf);
        const host = typeof name === "string" ? name : undefined;
        const server = host !== undefined && this.o.mtls(host) ? this.mutual : this.plain;
        server.emit("connection", socket);
      } catch (e) {
        this.o.log(`proxy: TLS connection dropped: ${String(e)}`);
        socket.destroy();
      }
    };
    socket.on("data", onData);
    socket.once("close", () => clearTimeout(timer));
  }

  listen(port: number, host: string): Promise<number> {
    return new Promise((resolve, reject) => {
      this.listener.once("error", reject);
      this.listener.listen(port, host, () => {
        this.listener.off("error", reject);
        const a = this.listener.address();
        resolve(typeof a === "object" && a ? a.port : port);
      });
    });
  }

  /** Stops accepting; idle keep-alive connections close. */
  stopAccepting(): void {
    this.listener.close();
    for (const s of [this.plain, this.mutual]) s.close();
  }

  /** Ends every connection still open. */
  closeAll(): void {
    for (const s of [this.plain, this.mutual]) s.closeAllConnections();
    for (const s of this.sockets) s.destroy();
  }
}
