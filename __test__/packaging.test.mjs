// The package as npm users get it: `npm pack` the main package and the
// platform packages (npm/<platform>/, this host's with the built release
// binary in it), install the tarballs into fresh projects with no Rust
// toolchain on PATH, and use them:
//
// 1. `require("rivetkit-native")` loads the binary from its platform
//    package, and the install ran no script of ours (installed without
//    --ignore-scripts; our only dependency has none either);
// 2. a RivetKit 2.3.19 app whose `@rivetkit/rivetkit-napi` is this package
//    (the README's alias and override) answers an action from RivetKit's
//    own client on the embedded engine, and exits on SIGINT.
//
// The other platform packages are packed too (without a binary): npm must
// skip them by their os/cpu/libc fields, as it does with the published ones.
// Dependencies come from the npm cache when they are there (the repository's
// `npm install` fills it). Needs the release build (`npm install` or
// `npm run build`, which copies it into npm/<platform>/), else the binary in
// the repository root.

import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";

import { BINARY_NAME, hostPlatform } from "../scripts/platform.mjs";
import { findFreePorts, waitFor } from "./helpers/engine.mjs";

const EXIT_BOUND_MS = 5_000;
const root = fileURLToPath(new URL("..", import.meta.url));
const rootPackage = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const platform = hostPlatform();
const binaryFile = `${BINARY_NAME}.${platform}.node`;
const platformPackage = `${BINARY_NAME}-${platform}`;
const binary = [join(root, "npm", platform, binaryFile), join(root, binaryFile)].find((f) => existsSync(f));
const work = mkdtempSync(join(tmpdir(), "rivetkit-native-packaging-"));

/** PATH without any directory that holds cargo or rustc. */
const exe = process.platform === "win32" ? ".exe" : "";
const noRustPath = [
	dirname(process.execPath),
	...(process.env.PATH ?? "")
		.split(delimiter)
		.filter((d) => d && !existsSync(join(d, `cargo${exe}`)) && !existsSync(join(d, `rustc${exe}`))),
].join(delimiter);
const noRustEnv = { ...process.env, PATH: noRustPath, CARGO: "", RUSTC: "" };
delete noRustEnv.CARGO;
delete noRustEnv.RUSTC;

/** Runs npm (the one running this test, else the one on PATH). */
function npm(args, { cwd, env = noRustEnv } = {}) {
	const cli = process.env.npm_execpath;
	const [file, argv] = cli && /\.c?js$/.test(cli) ? [process.execPath, [cli, ...args]] : ["npm", args];
	const res = spawnSync(file, argv, { cwd, env, encoding: "utf8", shell: process.platform === "win32" && file === "npm" });
	if (res.status !== 0) throw new Error(`npm ${args.join(" ")} failed (${res.status}):\n${res.stdout}\n${res.stderr}`);
	return res.stdout;
}

// --prefer-online: the app has no lockfile, and with --prefer-offline npm
// mixed package metadata cached hours apart (ETARGET for a version one
// cached manifest asked for and another did not list yet).
const INSTALL = ["install", "--prefer-online", "--no-audit", "--no-fund", "--loglevel=error"];

describe("packaging: the published layout, installed with no Rust toolchain", { skip: !binary && `no ${binaryFile} built` }, () => {
	const tarballs = {};
	let packed;
	const started = [];

	before(() => {
		// The platform packages as `napi artifacts` leaves them: this host's
		// with its binary, the others without (they are only packed to be
		// skipped by npm).
		const stage = join(work, "npm");
		for (const dir of readdirSync(join(root, "npm"))) {
			if (!existsSync(join(root, "npm", dir, "package.json"))) continue;
			mkdirSync(join(stage, dir), { recursive: true });
			for (const f of ["package.json", "README.md"]) {
				if (existsSync(join(root, "npm", dir, f))) copyFileSync(join(root, "npm", dir, f), join(stage, dir, f));
			}
		}
		assert.ok(existsSync(join(stage, platform, "package.json")), `npm/${platform}/package.json exists`);
		copyFileSync(binary, join(stage, platform, binaryFile));

		const out = join(work, "tarballs");
		mkdirSync(out);
		const dirs = readdirSync(stage).map((d) => join(stage, d));
		// Packing the repository runs its `prepare`, which must do nothing here.
		packed = JSON.parse(npm(["pack", "--json", "--pack-destination", out, root, ...dirs], { cwd: root, env: process.env }));
		for (const p of packed) tarballs[p.name] = join(out, p.filename);
	});

	after(() => {
		for (const { child, enginePid } of started) {
			if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
			const pid = enginePid();
			if (pid) {
				try {
					process.kill(pid, "SIGKILL");
				} catch {}
			}
		}
		rmSync(work, { recursive: true, force: true });
	});

	test("the tarballs: the loader in the main package, each binary in its own", () => {
		const main = packed.find((p) => p.name === rootPackage.name);
		assert.deepEqual(main.files.map((f) => f.path).sort(), ["README.md", "index.d.ts", "index.js", "package.json"]);
		const manifest = JSON.parse(execFileSync("tar", ["-xOzf", tarballs[rootPackage.name], "package/package.json"], { encoding: "utf8" }));
		assert.equal(manifest.private, undefined, "publishable");
		for (const script of ["preinstall", "install", "postinstall"]) {
			assert.equal(manifest.scripts?.[script], undefined, `no ${script} script reaches users`);
		}
		assert.equal(Object.keys(manifest.optionalDependencies).length, rootPackage.napi.targets.length);
		for (const [name, version] of Object.entries(manifest.optionalDependencies)) {
			assert.equal(version, manifest.version, `${name} at the same version`);
			assert.ok(tarballs[name], `${name} is one of npm/*`);
		}

		const own = packed.find((p) => p.name === platformPackage);
		assert.equal(own.version, manifest.version);
		assert.deepEqual(own.files.map((f) => f.path).sort(), ["README.md", binaryFile, "package.json"].sort());
	});

	/** Overrides that send every platform package to its tarball, as the registry would. */
	const platformOverrides = () =>
		Object.fromEntries(
			Object.keys(rootPackage.optionalDependencies).map((name) => [name, `file:${tarballs[name]}`]),
		);

	test("require('rivetkit-native') loads the prebuilt binary; the install runs no script of ours", () => {
		const dir = join(work, "plain");
		mkdirSync(dir);
		writeFileSync(
			join(dir, "package.json"),
			JSON.stringify({
				name: "plain-consumer",
				private: true,
				dependencies: { [rootPackage.name]: `file:${tarballs[rootPackage.name]}` },
				overrides: platformOverrides(),
			}),
		);
		assert.equal(spawnSync("cargo", ["--version"], { env: noRustEnv }).error?.code, "ENOENT", "no cargo on PATH");
		// Scripts allowed: a `prepare` or install script of ours would fail
		// (no scripts/ in the tarball, no cargo).
		npm(INSTALL, { cwd: dir });

		const installed = readdirSync(join(dir, "node_modules")).filter((n) => n.startsWith(`${BINARY_NAME}-`));
		assert.deepEqual(installed, [platformPackage], "npm installs only this platform's package");
		const probe = `
			const m = require(${JSON.stringify(rootPackage.name)});
			new m.CoreRegistry();
			const loaded = process.report.getReport().sharedObjects.filter((f) => f.endsWith(".node"));
			console.log(JSON.stringify({ exports: Object.keys(m).length, loaded }));
		`;
		const res = JSON.parse(execFileSync(process.execPath, ["-e", probe], { cwd: dir, env: noRustEnv, encoding: "utf8" }));
		assert.ok(res.exports > 10, `exports: ${res.exports}`);
		assert.deepEqual(
			res.loaded.map((f) => f.split(/[\\/]node_modules[\\/]/).pop().replace(/\\/g, "/")),
			[`${platformPackage}/${binaryFile}`],
		);
	});

	test("a RivetKit 2.3.19 app on the installed package serves the official client and exits on SIGINT", async (t) => {
		const dir = join(work, "app");
		mkdirSync(dir);
		const rivetkitVersion = rootPackage.devDependencies.rivetkit;
		writeFileSync(
			join(dir, "package.json"),
			JSON.stringify({
				name: "rivetkit-consumer",
				private: true,
				type: "module",
				dependencies: {
					rivetkit: rivetkitVersion,
					"@rivetkit/rivetkit-napi": `file:${tarballs[rootPackage.name]}`,
				},
				overrides: { "@rivetkit/rivetkit-napi": "$@rivetkit/rivetkit-napi", ...platformOverrides() },
			}),
		);
		writeFileSync(
			join(dir, "server.mjs"),
			`import { actor, setup } from "rivetkit";
const counter = actor({
	state: { count: 0 },
	actions: { increment: (c, by = 1) => (c.state.count += by) },
});
setup({ use: { counter } }).start();
`,
		);
		writeFileSync(
			join(dir, "client.mjs"),
			`import { createClient } from "rivetkit/client";
const client = createClient({ endpoint: process.argv[2] });
const counter = client.counter.getOrCreate(["packaging"]);
await counter.increment(2);
console.log(JSON.stringify(await counter.increment(3)));
`,
		);
		// rivetkit's own dependencies have native build scripts (SQLite, ...)
		// that this app does not need: skip every script.
		npm([...INSTALL, "--ignore-scripts"], { cwd: dir });
		const napiManifest = JSON.parse(readFileSync(join(dir, "node_modules/@rivetkit/rivetkit-napi/package.json"), "utf8"));
		assert.equal(napiManifest.name, rootPackage.name, "@rivetkit/rivetkit-napi is rivetkit-native");

		const port = (await findFreePorts()).guard;
		const endpoint = `http://127.0.0.1:${port}`;
		const child = spawn(process.execPath, ["server.mjs"], {
			cwd: dir,
			env: {
				...noRustEnv,
				RIVET_ENDPOINT: endpoint,
				RIVET_RUN_ENGINE_PORT: String(port),
				RIVETKIT_STORAGE_PATH: join(work, "storage"),
				RIVET_LOG_LEVEL: "info",
			},
			stdio: ["ignore", "pipe", "pipe"],
		});
		let out = "";
		child.stdout.on("data", (d) => (out += d));
		child.stderr.on("data", (d) => (out += d));
		const exited = once(child, "exit");
		const enginePid = () => Number(out.match(/engine ready after .*pid=(\d+)/)?.[1]) || 0;
		started.push({ child, enginePid });

		await waitFor(() => child.exitCode !== null || /registry serving/.test(out), { timeoutMs: 90_000, what: "the app to serve" });
		assert.match(out, /registry serving/, out);
		if (process.platform === "linux") {
			const maps = readFileSync(`/proc/${child.pid}/maps`, "utf8");
			assert.ok(maps.includes(`/node_modules/${platformPackage}/${binaryFile}`), "the app runs on the installed binary");
		}

		// RivetKit's client, from the app's own install. Now and then engine
		// 2.3.19 does not hand a new actor to the host in time (see
		// rivetkit-app.test.mjs): that one error is retried once.
		const call = () =>
			spawnSync(process.execPath, ["client.mjs", endpoint], { cwd: dir, env: noRustEnv, encoding: "utf8", timeout: 60_000 });
		let res = call();
		if (res.status !== 0 && /route_resolve_query_timeout/.test(res.stderr)) {
			t.diagnostic("the engine did not start the new actor in time; retrying once");
			res = call();
		}
		assert.equal(res.status, 0, `${res.stdout}\n${res.stderr}\n--- app ---\n${out}`);
		assert.equal(JSON.parse(res.stdout.trim().split("\n").pop()), 5);

		child.kill("SIGINT");
		const timer = setTimeout(() => child.kill("SIGKILL"), EXIT_BOUND_MS);
		const [code, signal] = await exited;
		clearTimeout(timer);
		assert.ok(signal === "SIGINT" || code === 130, `exits on SIGINT, got ${code}/${signal}\n${out}`);

		// The engine outlives the app on purpose; the test owns it.
		const pid = enginePid();
		if (pid) {
			try {
				process.kill(pid, "SIGTERM");
				await waitFor(
					() => {
						try {
							process.kill(pid, 0);
							return false;
						} catch {
							return true;
						}
					},
					{ timeoutMs: 10_000, what: "the engine to exit" },
				);
			} catch {
				try {
					process.kill(pid, "SIGKILL");
				} catch {}
			}
		}
	});
});
