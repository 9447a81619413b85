import { stringify } from "yaml";
import type { MonitoringPlan } from "./plan.js";

/**
 * Alertmanager's configuration (alertmanager/alertmanager.yml): every alert to `alert_email`
 * through the SMTP relay of the call, the password read from the secret file (never in this
 * file). Without a relay or an address, alerts go to a receiver that sends nothing: they are
 * seen in Alertmanager's UI and API only (the MonitoringStack says so).
 */

export const ALERTMANAGER_FILE = "alertmanager/alertmanager.yml";

/** Whether a plan mails its alerts. */
export const mailsAlerts = (plan: MonitoringPlan) => plan.alert_email !== null && plan.smtp !== null;

export function alertmanagerConfig(plan: MonitoringPlan): string {
  const smtp = plan.smtp;
  const mail = mailsAlerts(plan) && smtp !== null;
  const global: Record<string, unknown> = { resolve_timeout: "5m" };
  if (mail) {
    global.smtp_smarthost = `${smtp.host}:${smtp.port}`;
    global.smtp_from = smtp.from;
    global.smtp_hello = plan.public_host;
    // a relay reached with a user and a password needs STARTTLS; one without (a local relay) may be plain
    global.smtp_require_tls = smtp.user !== null;
    if (smtp.user !== null) global.smtp_auth_username = smtp.user;
    if (smtp.has_password) global.smtp_auth_password_file = "../secrets/smtp_password";
  }
  const receiver = mail
    ? {
        name: "mail",
        email_configs: [
          {
            to: plan.alert_email,
            send_resolved: true,
            headers: { Subject: `[${plan.project}] {{ .Status | toUpper }} {{ .CommonLabels.alertname }}` },
          },
        ],
      }
    : { name: "none" };
  return stringify({
    global,
    route: {
      receiver: receiver.name,
      group_by: ["alertname"],
      group_wait: "10s",
      group_interval: "1m",
      repeat_interval: "4h",
    },
    receivers: [receiver],
  });
}
