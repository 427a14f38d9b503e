"use strict";

// index.d.ts types a use of the whole API (types/usage.ts), checked by tsc
// --strict from Debian's node-typescript; and the check can fail: the
// misuses marked @ts-expect-error there are errors once unmarked. Skipped
// without tsc.
const { test } = require("node:test");
const assert = require("node:assert/strict");
const { spawnSync } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");

const hasTsc = spawnSync("tsc", ["--version"], { encoding: "utf8" }).status === 0;
const skip = !hasTsc && "no tsc (apt-get install node-typescript)";

function tsc(usage) {
  return spawnSync("tsc", [
    "--noEmit", "--strict", "--target", "es2020", "--lib", "es2020,dom,dom.iterable,esnext.asynciterable",
    "--moduleResolution", "node", path.join(__dirname, "types/shim.d.ts"), usage,
  ], { encoding: "utf8", timeout: 60000 });
}

test("index.d.ts types the package's API (tsc --strict)", { skip }, () => {
  const run = tsc(path.join(__dirname, "types/usage.ts"));
  assert.equal(run.status, 0, `tsc:\n${run.stdout}${run.stderr}`);
});

test("the type check fails on the misuses", { skip }, (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "redis-lock-types-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const source = fs.readFileSync(path.join(__dirname, "types/usage.ts"), "utf8");
  const misuses = source.match(/^\s*\/\/ @ts-expect-error/gm).length;
  const unmarked = path.join(dir, "usage.ts");
  const index = path.resolve(__dirname, "../index");
  fs.writeFileSync(unmarked, source.replace(/\/\/ @ts-expect-error.*\n/g, "").replace('"../../index"', JSON.stringify(index)));
  const run = tsc(unmarked);
  assert.notEqual(run.status, 0);
  assert.equal((run.stdout.match(/error TS/g) || []).length, misuses, run.stdout);
});
