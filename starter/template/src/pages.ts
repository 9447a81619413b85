/** The sign-in page: its forms post to the app's `/auth/*` routes, which answer them with a redirect back here. */

/** What the page shows besides its forms. */
export interface LoginView {
  signedIn?: boolean;
  /** A key of `NOTICES` (from `?notice=`): the page never shows text it was sent. */
  notice?: string;
  /** A login that needs a second factor: the challenge to answer with a code. */
  challenge?: string;
}

/** Fixed messages for what a form post ended with. */
export const NOTICES: Record<string, string> = {
  check_mail: "Check your mail: open the link in it to verify your address, then sign in.",
  unauthenticated: "The email or the password is not right.",
  forbidden: "Verify your email address first: open the link in the mail sent at sign-up.",
  rate_limited: "Too many attempts. Try again later.",
  invalid_input: "Check the email address, and use a password of at least 8 characters.",
  failed: "That did not work. Try again.",
};

/** The notice key for a platform answer's error code (an unknown code is `failed`). */
export function noticeOf(code: unknown): string {
  return typeof code === "string" && code !== "check_mail" && Object.hasOwn(NOTICES, code) ? code : "failed";
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function forms(view: LoginView): string {
  if (view.signedIn)
    return `<p>You are signed in.</p>
    <form method="post" action="/auth/logout"><button type="submit">Sign out</button></form>`;
  if (view.challenge)
    return `<form method="post" action="/auth/2fa/challenge">
      <input type="hidden" name="challenge_id" value="${escapeHtml(view.challenge)}">
      <label>Code from your authenticator app <input name="code" inputmode="numeric" autocomplete="one-time-code" required></label>
      <button type="submit">Continue</button>
    </form>`;
  return `<form method="post" action="/auth/login">
      <label>Email <input name="email" type="email" autocomplete="username" required></label>
      <label>Password <input name="password" type="password" autocomplete="current-password" minlength="8" required></label>
      <button type="submit">Sign in</button>
      <button type="submit" formaction="/auth/signup">Create account</button>
    </form>`;
}

export function loginPage(app: string, view: LoginView = {}): string {
  const notice = view.notice && Object.hasOwn(NOTICES, view.notice) ? NOTICES[view.notice] : undefined;
  return `<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    <title>Sign in · ${escapeHtml(app || "app")}</title>
    <style>
      body { font: 16px/1.5 system-ui, sans-serif; max-width: 22rem; margin: 4rem auto; padding: 0 1rem; }
      label { display: block; margin: 0 0 .75rem; }
      input { display: block; width: 100%; padding: .4rem; box-sizing: border-box; }
      button { margin-right: .5rem; padding: .4rem .8rem; }
    </style>
  </head>
  <body>
    <h1>${escapeHtml(app || "app")}</h1>
    ${notice ? `<p role="status">${escapeHtml(notice)}</p>\n    ` : ""}${forms(view)}
  </body>
</html>
`;
}
