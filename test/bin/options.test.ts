import test from "ava";
import { hostPort, OptionError, optionsFromEnv } from "../../bin/options.js";

/** Settings of slipwayd read from its environment (bin/options.ts). */

test("SLIPWAY_PROXY_ADVERTISE_HTTP/HTTPS: the proxy's presence names these host:port addresses", (t) => {
  const o = optionsFromEnv({
    SLIPWAY_PROXY_ADVERTISE_HTTP: "10.0.0.5:80",
    SLIPWAY_PROXY_ADVERTISE_HTTPS: "[fd00::5]:443",
  });
  t.deepEqual(o.proxy?.advertise, { http: "10.0.0.5:80", https: "[fd00::5]:443" });
  t.is(optionsFromEnv({}).proxy?.advertise, undefined, "unset: the listen addresses");
  t.deepEqual(optionsFromEnv({ SLIPWAY_PROXY_ADVERTISE_HTTP: "edge.example.com:8080" }).proxy?.advertise, {
    http: "edge.example.com:8080",
  });
});

test("an address to advertise without a port, with a bad port or with a path is refused, naming what it takes", (t) => {
  for (const bad of [
    "10.0.0.5",
    "10.0.0.5:0",
    "10.0.0.5:70000",
    "http://10.0.0.5:80",
    "a b:80",
    "10.0.0.5:80/x",
  ]) {
    const e = t.throws(() => hostPort(bad), { instanceOf: OptionError }, bad);
    t.regex(e!.message, /host:port/);
    t.throws(() => optionsFromEnv({ SLIPWAY_PROXY_ADVERTISE_HTTPS: bad }), { instanceOf: OptionError });
  }
});
