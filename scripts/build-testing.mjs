#!/usr/bin/env node
// `npm run build:testing`: the debug addon with the `testing` feature
// (`__testCallCallback`, for the JS tests of the callback machinery alone),
// at target/testing/rivetkit-native.node. Never part of a shipped build.
//
// It is a plain `cargo build` of the workspace's test targets with the
// feature on, the same build `cargo test --workspace --features rivetkit-native/testing`
// (in `npm test`) needs: one compile of the dependency tree serves both.
// `napi build` would compile the whole tree a second time (its own target
// directory and flags), about 3 minutes on a 2-core machine.

import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const cargo = process.env.CARGO || "cargo";
const res = spawnSync(cargo, ["build", "--workspace", "--all-targets", "--features", "rivetkit-native/testing"], {
	cwd: root,
	stdio: "inherit",
});
if (res.status !== 0) process.exit(res.status ?? 1);

const library = {
	linux: "librivetkit_native.so",
	darwin: "librivetkit_native.dylib",
	win32: "rivetkit_native.dll",
}[process.platform];
if (!library) throw new Error(`no cdylib name known for ${process.platform}`);
mkdirSync(join(root, "target", "testing"), { recursive: true });
copyFileSync(join(root, "target", "debug", library), join(root, "target", "testing", "rivetkit-native.node"));
console.error("built target/testing/rivetkit-native.node");
