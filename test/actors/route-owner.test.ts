import anyTest, { type TestFn } from "ava";
import { swapRoute } from "../../actors/tasks/routes.js";
import type { TaskContext } from "../../actors/tasks/types.js";
import { BUCKETS, encode, keys, type Resource, type Route } from "../../proto/mod.js";
import type { Bus } from "../../store/mod.js";
import { startTestNats, type TestNats } from "../helpers/infra.js";

/**
 * A route write of a roll (actors/tasks/routes.ts) never takes a host whose route belongs to
 * another app (security review #6): refused naming the owner, the route left as it was.
 */
const test = anyTest as TestFn<{ nats: TestNats; bus: Bus }>;

test.before(async (t) => {
  const nats = await startTestNats();
  t.context = { nats, bus: await nats.bus("route-owner") };
});
test.after.always(async (t) => {
  await t.context.bus?.close();
  await t.context.nats?.stop();
});

/** What swapRoute uses of a task's context: the bus, its resource, its log. */
function task(bus: Bus, app: string, lines: string[]): TaskContext {
  return {
    app,
    bus,
    resource: { id: `dep_${app}` } as Resource,
    log: async (line: string) => void lines.push(line),
  } as unknown as TaskContext;
}

const swap = (bus: Bus, app: string, host: string, port: number, lines: string[] = []) =>
  swapRoute(task(bus, app, lines), {
    app,
    service: "web",
    route: { host },
    upstream: { url: `http://127.0.0.1:${port}`, deployment_id: `dep_${app}`, health_path: "/health" },
    sealed: [],
  });

async function routeOf(bus: Bus, host: string): Promise<Route | undefined> {
  const e = await bus.kv.routes.get(keys.route(host));
  return e?.operation === "PUT" ? (e.json() as Route) : undefined;
}

test("a roll of another app does not take a host whose route is the first app's: refused naming the owner, the route unchanged", async (t) => {
  const { bus } = t.context;
  const first = await swap(bus, "shop", "shop.example.com", 4001);
  t.true(first.ok, first.error);
  const before = await routeOf(bus, "shop.example.com");
  t.is(before?.app, "shop");

  const taken = await swap(bus, "other", "shop.example.com", 4999);
  t.false(taken.ok);
  t.is(taken.error, "the host shop.example.com belongs to the app shop; its route is not other's to change");
  t.deepEqual(await routeOf(bus, "shop.example.com"), before);

  // the owner rolls on as before; a free host is anyone's
  const again = await swap(bus, "shop", "shop.example.com", 4002);
  t.true(again.ok, again.error);
  t.is((await routeOf(bus, "shop.example.com"))?.upstreams[0]?.url, "http://127.0.0.1:4002");
  t.true((await swap(bus, "other", "other.example.com", 4003)).ok);
});

test("a route deleted by hand is free again; a route written in between by another app is seen (compare-and-set)", async (t) => {
  const { bus } = t.context;
  const admin = bus; // behind the platform's back
  t.true((await swap(bus, "a1", "gone.example.com", 4010)).ok);
  await admin.pub.kvDelete(BUCKETS.routes, keys.route("gone.example.com"));
  t.true((await swap(bus, "a2", "gone.example.com", 4011)).ok, "a deleted route is free");
  t.is((await routeOf(bus, "gone.example.com"))?.app, "a2");
  // another app's route put straight into the bucket: the next roll of a2 reads it and stops
  const foreign: Route = {
    ...(await routeOf(bus, "gone.example.com"))!,
    app: "a3",
    updated_at: new Date().toISOString(),
  };
  await admin.pub.kvPut(BUCKETS.routes, keys.route("gone.example.com"), encode(foreign));
  const r = await swap(bus, "a2", "gone.example.com", 4012);
  t.false(r.ok);
  t.regex(r.error ?? "", /belongs to the app a3/);
  t.is((await routeOf(bus, "gone.example.com"))?.app, "a3");
});
