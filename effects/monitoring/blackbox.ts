import { stringify } from "yaml";

/**
 * The health probe's configuration (blackbox/blackbox.yml): Prometheus asks the blackbox
 * exporter to GET `health_url`, and `probe_success` is 0 when the answer is not 2xx within 5 s.
 * Redirects are not followed (a health check that moves is failing).
 */

export const BLACKBOX_FILE = "blackbox/blackbox.yml";

export function blackboxConfig(): string {
  return stringify({
    modules: {
      http_2xx: {
        prober: "http",
        timeout: "5s",
        http: { method: "GET", follow_redirects: false, preferred_ip_protocol: "ip4" },
      },
    },
  });
}
