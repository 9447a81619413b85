import test from "ava";
import { Counter, Gauge, Histogram, mergeFamilies, renderFamilies } from "../../proto/metrics-core.js";
import { forgetProxySeries, proxyDuration, proxyRequests } from "../../proto/mod.js";

test("metrics core: counters, gauges and histograms in Prometheus text; a changed series is written again", (t) => {
  const c = new Counter({ name: "t_total", help: "a counter\nwith two lines", labelNames: ["k"] as const });
  c.inc({ k: 'a"b\\c' });
  c.inc({ k: 'a"b\\c' }, 2);
  t.is(
    c.render(),
    '# HELP t_total a counter\\nwith two lines\n# TYPE t_total counter\nt_total{k="a\\"b\\\\c"} 3\n',
  );
  c.inc({ k: 'a"b\\c' });
  t.regex(c.render(), /t_total\{k="a\\"b\\\\c"\} 4\n$/, "the cached line follows the value");
  const h = new Histogram({ name: "t_seconds", help: "h", buckets: [0.1, 1] });
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5);
  t.is(
    h.render(),
    '# HELP t_seconds h\n# TYPE t_seconds histogram\nt_seconds_bucket{le="0.1"} 1\nt_seconds_bucket{le="1"} 2\nt_seconds_bucket{le="+Inf"} 3\nt_seconds_sum 5.55\nt_seconds_count 3\n',
  );
  const g = new Gauge({ name: "t_g", help: "g" });
  g.collect = () => g.set(undefined, 7);
  t.is(g.render(), "# HELP t_g g\n# TYPE t_g gauge\nt_g 7\n");
});

test("metrics core: threads' series of one name and labels are summed; the others kept", (t) => {
  const a = new Histogram({ name: "m_seconds", help: "m", labelNames: ["x"] as const, buckets: [1] });
  const b = new Histogram({ name: "m_seconds", help: "m", labelNames: ["x"] as const, buckets: [1] });
  a.observe({ x: "1" }, 0.5);
  b.observe({ x: "1" }, 2);
  b.observe({ x: "2" }, 0.5);
  const text = renderFamilies(mergeFamilies([[a.toJSON()], [b.toJSON()]]));
  t.true(text.includes('m_seconds_bucket{x="1",le="1"} 1\n'));
  t.true(text.includes('m_seconds_bucket{x="1",le="+Inf"} 2\n'));
  t.true(text.includes('m_seconds_count{x="1"} 2\n'));
  t.true(text.includes('m_seconds_count{x="2"} 1\n'));
  t.is(text.split("# TYPE").length, 2, "one family");
});

test("the proxy's series of upstreams a route no longer has are dropped (rolls do not grow them)", (t) => {
  const route = "forget.example.test";
  proxyRequests.inc({ route, upstream: "10.9.0.1:3000", status: "200" });
  proxyRequests.inc({ route, upstream: "10.9.0.2:3000", status: "200" });
  proxyRequests.inc({ route, upstream: "none", status: "503" });
  proxyDuration.observe({ route }, 0.01);
  forgetProxySeries(route, ["http://10.9.0.2:3000"]);
  const text = proxyRequests.render();
  t.false(text.includes("10.9.0.1:3000"));
  t.true(text.includes("10.9.0.2:3000"));
  t.true(text.includes(`route="${route}",upstream="none"`));
  forgetProxySeries(route, undefined);
  t.false(proxyRequests.render().includes(route));
  t.false(proxyDuration.render().includes(route));
});
