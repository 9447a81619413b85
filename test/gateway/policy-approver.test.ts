import test from "ava";
import { approverOf } from "../../gateway/policy.js";
import { isPlatformError, POLICY_COMMANDS, validateBody } from "../../proto/mod.js";

/**
 * Who approves a staged action (docs/policies.md, security review #2): the operator is a flag of
 * the principal (the control token), never the value of a user id. Before, a user whose id was
 * "operator" (a forged access token with `sub: "operator"`) was sent to the app's actor as
 * `by: "operator"`, which skipped the owner check and approved another owner's staged action.
 */

test('approver: a user whose id is "operator" is not the operator (refused), nor is any id that is not a usr_ id', (t) => {
  for (const owner of ["operator", "Operator", "_app", "usr_", "usr_a b", "x"]) {
    const e = t.throws(() => approverOf({ kind: "app", app: "shop", owner }), undefined, owner);
    t.true(isPlatformError(e) && e.code === "forbidden", owner);
  }
  t.throws(() => approverOf({ kind: "app", app: "shop" }), undefined, "the app's own token");
});

test("approver: the control token approves as the operator; a user as itself", (t) => {
  t.deepEqual(approverOf({ kind: "operator" }), { operator: true });
  t.deepEqual(approverOf({ kind: "app", app: "shop", owner: "usr_abc-1" }), {
    operator: false,
    by: "usr_abc-1",
  });
});

test('approver: the actor\'s approve command takes the operator only as its flag (`by: "operator"` is refused)', (t) => {
  const approve = POLICY_COMMANDS.approve;
  t.throws(() => validateBody(approve, { approval_id: "apr_1", by: "operator" }));
  t.throws(() => validateBody(approve, { approval_id: "apr_1", operator: false, by: "operator" }));
  t.notThrows(() => validateBody(approve, { approval_id: "apr_1", operator: false, by: "usr_1" }));
  t.notThrows(() => validateBody(approve, { approval_id: "apr_1", operator: true }));
});
