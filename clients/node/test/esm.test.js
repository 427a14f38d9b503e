"use strict";

// The package as an ES module: `import { … } from "redis-lock-client"`
// gives every name index.d.ts declares, and they are the very classes
// require() gives (one copy: instanceof works across both).
const { test } = require("node:test");
const assert = require("node:assert/strict");
const { spawnSync } = require("child_process");
const path = require("path");

const NAMES = [
  "Locks", "Lock", "Semaphore", "Election", "Session", "keySlot",
  "LockError", "NotAcquiredError", "LostError", "RevokedError", "ServerError", "LimitError", "TimeoutError",
  "NotReplicatedError", "ModuleVersionError", "MIN_MODULE_VERSION",
];

// Runs `source` as an ES module from the package's directory, where the
// package can import itself by name (package.json "exports").
function esm(source) {
  return spawnSync(process.execPath, ["--input-type=module", "-e", source], {
    cwd: path.resolve(__dirname, ".."), encoding: "utf8", timeout: 30000,
  });
}

test("import { … } from the package: every exported name, the same classes as require()", () => {
  const run = esm(`
    import { ${NAMES.join(", ")} } from "redis-lock-client";
    import whole from "redis-lock-client";
    import { createRequire } from "node:module";
    const required = createRequire(import.meta.url)("redis-lock-client");
    const got = { ${NAMES.join(", ")} };
    for (const [name, value] of Object.entries(got)) {
      if (value === undefined || value !== required[name] || whole[name] !== value) throw new Error(name + " differs");
    }
    const lost = new LostError("expired");
    if (!(lost instanceof required.LockError) || !(new required.RevokedError("x") instanceof LostError)) throw new Error("instanceof");
    console.log("ok " + Object.keys(got).length);
  `);
  assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
  assert.equal(run.stdout.trim(), `ok ${NAMES.length}`);
});

test("import of index.js by its path names every export too", () => {
  const index = path.resolve(__dirname, "../index.js");
  const run = esm(`import { ${NAMES.join(", ")} } from ${JSON.stringify(index)}; console.log("ok");`);
  assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
});
