import test from "ava";
import { execFileSync } from "node:child_process";
import { realpathSync } from "node:fs";
import { interpreterOf, sharedLibraries } from "../../effects/base-image-rootfs.js";

/**
 * The shared libraries an image needs (effects/base-image-rootfs.ts): from ldd, or where ldd is
 * missing (the platform's own image) from the binary's loader, named by its PT_INTERP.
 */

test("a binary's loader is read from its ELF header; a static binary has none; a text file is not ELF", async (t) => {
  const node = realpathSync(process.execPath);
  const loader = await interpreterOf(node);
  t.truthy(loader);
  t.regex(loader!, /^\/.*ld-linux.*\.so\.\d$/);
  t.is(await interpreterOf("/etc/hostname").catch(() => undefined), undefined);
  const busybox = (() => {
    try {
      return execFileSync("sh", ["-c", "command -v busybox"], { encoding: "utf8" }).trim();
    } catch {
      return "";
    }
  })();
  if (
    busybox &&
    /statically linked|not a dynamic/.test(
      execFileSync("sh", ["-c", `ldd ${busybox} 2>&1 || true`], { encoding: "utf8" }),
    )
  )
    t.is(await interpreterOf(busybox), null);
});

test("without ldd on PATH, the loader lists the same libraries as ldd", async (t) => {
  const node = realpathSync(process.execPath);
  const withLdd = await sharedLibraries(node);
  const path = process.env.PATH;
  process.env.PATH = "/nonexistent";
  try {
    const withLoader = await sharedLibraries(node);
    t.deepEqual(withLoader, withLdd);
    t.true(withLoader.some((l) => /libc\.so/.test(l)));
  } finally {
    process.env.PATH = path;
  }
});
