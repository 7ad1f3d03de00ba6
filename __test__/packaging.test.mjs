// The package as npm users get it: `npm pack` the main package and the
// platform packages (npm/<platform>/, this host's with the built release
// binary in it), install the tarballs into fresh projects with no Rust
// toolchain on PATH, and use them:
//
// 1. `require("rivetkit-native")` loads the binary from its platform
//    package, and the install ran no script of ours (installed without
//    --ignore-scripts; our only dependency has none either) and listed none
//    (npm 11 warns about "install scripts not yet covered by allowScripts":
//    a probe package with a `prepare` shows that it would);
// 2. without the platform package (`--omit=optional`), `require()` throws
//    `napi.binding_not_found` naming the package, the detected platform and
//    the fix; with a broken binary or on an unsupported architecture it
//    says so (load-error.js);
// 3. a RivetKit 2.3.19 app whose `@rivetkit/rivetkit-napi` is this package
//    (the README's alias and override) answers an action from RivetKit's
//    own client on the embedded engine, and exits on SIGINT.
//
// The main package is packed as a release packs it, with its scripts on
// (`prepack` strips `prepare`, scripts/pack-manifest.mjs), from a copy of
// its files, so that the checkout's package.json is never rewritten.
// The other platform packages are packed too (without a binary): npm must
// skip them by their os/cpu/libc fields, as it does with the published ones.
// Dependencies come from the npm cache when they are there (the repository's
// `npm install` fills it). Needs the release build (`npm install` or
// `npm run build`, which copies it into npm/<platform>/), else the binary in
// the repository root.

import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import {
	copyFileSync,
	cpSync,
	existsSync,
	mkdirSync,
	mkdtempSync,
	readFileSync,
	readdirSync,
	rmSync,
	writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";

import { INSTALL_SCRIPTS } from "../scripts/pack-manifest.mjs";
import { BINARY_NAME, hostPlatform } from "../scripts/platform.mjs";
import { findFreePorts, waitFor } from "./helpers/engine.mjs";
import { stopEnginesUnder } from "./helpers/processes.mjs";

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

/** Runs npm (the one running this test, else the one on PATH); returns `{stdout, stderr}`. */
function npmRun(args, { cwd, env = noRustEnv } = {}) {
	const cli = process.env.npm_execpath;
	const [file, argv] = cli && /\.c?js$/.test(cli) ? [process.execPath, [cli, ...args]] : ["npm", args];
	const res = spawnSync(file, argv, {
		cwd,
		env,
		encoding: "utf8",
		shell: process.platform === "win32" && file === "npm",
	});
	if (res.status !== 0) throw new Error(`npm ${args.join(" ")} failed (${res.status}):\n${res.stdout}\n${res.stderr}`);
	return res;
}

/** npm's stdout. */
const npm = (args, opts) => npmRun(args, opts).stdout;

// --prefer-online: the app has no lockfile, and with --prefer-offline npm
// mixed package metadata cached hours apart (ETARGET for a version one
// cached manifest asked for and another did not list yet).
const INSTALL = ["install", "--prefer-online", "--no-audit", "--no-fund", "--loglevel=error"];
/** The probe package that has a `prepare` (see the plain install). */
const PROBE = "install-script-probe";

describe("packaging: the published layout, installed with no Rust toolchain", {
	skip: !binary && `no ${binaryFile} built`,
}, () => {
	const tarballs = {};
	let packed;
	let mainStage;
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

		// The main package: its files, and the script its prepack and
		// postpack run. No scripts/dev-setup.mjs: a `prepare` left in
		// package.json would fail the pack.
		mainStage = join(work, "main");
		mkdirSync(join(mainStage, "scripts"), { recursive: true });
		for (const f of ["package.json", "README.md", ...rootPackage.files])
			cpSync(join(root, f), join(mainStage, f), { recursive: true });
		copyFileSync(join(root, "scripts", "pack-manifest.mjs"), join(mainStage, "scripts", "pack-manifest.mjs"));

		// A package with a `prepare`: what npm lists when a package has one.
		const probe = join(work, "probe");
		mkdirSync(probe);
		writeFileSync(
			join(probe, "package.json"),
			JSON.stringify({ name: PROBE, version: "1.0.0", scripts: { prepare: "node -e 0" } }),
		);

		const out = join(work, "tarballs");
		mkdirSync(out);
		const dirs = readdirSync(stage).map((d) => join(stage, d));
		// Scripts on, as a release packs (`npm publish` runs the same prepack).
		packed = JSON.parse(
			npm(["pack", "--json", "--pack-destination", out, mainStage, probe, ...dirs], {
				cwd: mainStage,
				env: process.env,
			}),
		);
		for (const p of packed) tarballs[p.name] = join(out, p.filename);
	});

	after(async () => {
		for (const { child, enginePid } of started) {
			if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
			const pid = enginePid();
			if (pid) {
				try {
					process.kill(pid, "SIGKILL");
				} catch {}
			}
		}
		// Any other engine with its storage here (a pid the log did not show).
		await stopEnginesUnder(work);
		rmSync(work, { recursive: true, force: true });
	});

	test("the tarballs: the loader in the main package, each binary in its own", () => {
		const main = packed.find((p) => p.name === rootPackage.name);
		assert.deepEqual(main.files.map((f) => f.path).sort(), [
			"README.md",
			"index.d.ts",
			"index.js",
			"load-error.js",
			"package.json",
		]);
		const manifest = JSON.parse(
			execFileSync("tar", ["-xOzf", tarballs[rootPackage.name], "package/package.json"], { encoding: "utf8" }),
		);
		assert.equal(manifest.private, undefined, "publishable");
		assert.ok(rootPackage.scripts.prepare, "the repository itself has a prepare");
		for (const script of INSTALL_SCRIPTS) {
			assert.equal(manifest.scripts?.[script], undefined, `no ${script} script reaches users`);
		}
		// postpack put the package.json back as it was.
		assert.equal(
			readFileSync(join(mainStage, "package.json"), "utf8"),
			readFileSync(join(root, "package.json"), "utf8"),
		);
		assert.ok(!existsSync(join(mainStage, ".package.json.prepack")), "no backup left behind");
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
		Object.fromEntries(Object.keys(rootPackage.optionalDependencies).map((name) => [name, `file:${tarballs[name]}`]));

	test("require('rivetkit-native') loads the prebuilt binary; the install runs and lists no script of ours", (t) => {
		const dir = join(work, "plain");
		mkdirSync(dir);
		writeFileSync(
			join(dir, "package.json"),
			JSON.stringify({
				name: "plain-consumer",
				private: true,
				dependencies: { [rootPackage.name]: `file:${tarballs[rootPackage.name]}`, [PROBE]: `file:${tarballs[PROBE]}` },
				overrides: platformOverrides(),
			}),
		);
		assert.equal(spawnSync("cargo", ["--version"], { env: noRustEnv }).error?.code, "ENOENT", "no cargo on PATH");
		// Scripts allowed: a `prepare` or install script of ours would fail
		// (no scripts/ in the tarball, no cargo). Warnings shown.
		const { stderr } = npmRun([...INSTALL.filter((a) => !a.startsWith("--loglevel")), "--loglevel=warn"], { cwd: dir });
		const listed = stderr.split("\n").filter((line) => /install-scripts/.test(line));
		if (listed.some((line) => line.includes(PROBE))) {
			assert.ok(
				!listed.some((line) => line.includes(rootPackage.name)),
				`npm lists no install script of ours:\n${listed.join("\n")}`,
			);
		} else {
			t.diagnostic(
				`this npm (${npm(["--version"]).trim()}) lists no install scripts; the packed manifest's check stands alone`,
			);
		}

		const installed = readdirSync(join(dir, "node_modules")).filter((n) => n.startsWith(`${BINARY_NAME}-`));
		assert.deepEqual(installed, [platformPackage], "npm installs only this platform's package");
		const probe = `
			const m = require(${JSON.stringify(rootPackage.name)});
			new m.CoreRegistry();
			const loaded = process.report.getReport().sharedObjects.filter((f) => f.endsWith(".node"));
			console.log(JSON.stringify({ exports: Object.keys(m).length, loaded }));
		`;
		const res = JSON.parse(
			execFileSync(process.execPath, ["-e", probe], { cwd: dir, env: noRustEnv, encoding: "utf8" }),
		);
		assert.ok(res.exports > 10, `exports: ${res.exports}`);
		assert.deepEqual(
			res.loaded.map((f) =>
				f
					.split(/[\\/]node_modules[\\/]/)
					.pop()
					.replace(/\\/g, "/"),
			),
			[`${platformPackage}/${binaryFile}`],
		);
	});

	test("without its platform package, require() names the package, the platform and the fix", () => {
		const dir = join(work, "alone");
		mkdirSync(dir);
		writeFileSync(
			join(dir, "package.json"),
			JSON.stringify({
				name: "alone-consumer",
				private: true,
				dependencies: { [rootPackage.name]: `file:${tarballs[rootPackage.name]}` },
				overrides: platformOverrides(),
			}),
		);
		npm([...INSTALL, "--omit=optional"], { cwd: dir });
		assert.ok(!existsSync(join(dir, "node_modules", platformPackage)), "the platform package is left out");

		/** What `require()` throws, after `prelude`. */
		const loadError = (prelude = "") => {
			const probe = `${prelude}
				try {
					require(${JSON.stringify(rootPackage.name)});
					console.log("null");
				} catch (e) {
					const chain = [];
					for (let c = e.cause; c; c = c.cause) chain.push(c.message);
					console.log(JSON.stringify({ message: e.message, code: e.code, group: e.group, rivetCode: e.rivetCode, metadata: e.metadata, chain }));
				}`;
			const err = JSON.parse(
				execFileSync(process.execPath, ["-e", probe], { cwd: dir, env: noRustEnv, encoding: "utf8" }),
			);
			assert.ok(err, "require() throws");
			assert.equal(err.code, "napi.binding_not_found");
			assert.equal(err.group, "napi");
			assert.equal(err.rivetCode, "binding_not_found");
			assert.ok(
				err.chain.some((m) => m.includes("Cannot find module")),
				`the loader's attempts are the cause: ${err.chain}`,
			);
			assert.doesNotMatch(err.message, /npm has a bug/);
			return err;
		};
		const version = rootPackage.version;
		const install = `npm install ${platformPackage}@${version}`;

		const missing = loadError();
		assert.equal(missing.metadata.package, platformPackage);
		assert.equal(missing.metadata.platform, platform);
		assert.equal(missing.metadata.install, install);
		assert.ok(
			missing.message.includes(`${rootPackage.name}: no native binary loaded for ${platform} (`),
			missing.message,
		);
		assert.ok(missing.message.includes(`the package ${platformPackage}@${version} is not installed`), missing.message);
		assert.ok(missing.message.includes(`Fix: ${install}`), missing.message);
		assert.ok(missing.message.includes(`npm install ./${platformPackage}-${version}.tgz`), missing.message);
		if (process.platform === "linux") assert.match(missing.metadata.platformDescription, /^linux \S+, (glibc|musl)/);

		// Installed by hand with a file that is no binary: the loader's own
		// error says why it did not load.
		const broken = join(dir, "node_modules", platformPackage);
		mkdirSync(broken);
		copyFileSync(join(root, "npm", platform, "package.json"), join(broken, "package.json"));
		writeFileSync(join(broken, binaryFile), "not a binary\n");
		const failed = loadError();
		assert.ok(
			failed.message.includes(`a binary was found but did not load: ${join(broken, binaryFile)}`),
			failed.message,
		);
		assert.ok(failed.message.includes(`Fix: reinstall its package: ${install}`), failed.message);
		rmSync(broken, { recursive: true });

		// An architecture no package is built for.
		const unsupported = loadError('Object.defineProperty(process, "arch", { value: "ia32" });');
		assert.ok(unsupported.metadata.platform.startsWith(`${process.platform}-ia32`), unsupported.metadata.platform);
		assert.deepEqual(
			unsupported.metadata.supported.map((p) => `${BINARY_NAME}-${p}`).sort(),
			Object.keys(rootPackage.optionalDependencies).sort(),
		);
		assert.equal(unsupported.metadata.install, null);
		assert.ok(unsupported.message.includes("no package is built for this platform"), unsupported.message);
		assert.ok(unsupported.message.includes(unsupported.metadata.supported.join(", ")), unsupported.message);
	});

	test("a RivetKit 2.3.19 app on the installed package serves the official client and exits on SIGINT", async () => {
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
		const napiManifest = JSON.parse(
			readFileSync(join(dir, "node_modules/@rivetkit/rivetkit-napi/package.json"), "utf8"),
		);
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

		await waitFor(() => child.exitCode !== null || /registry serving/.test(out), {
			timeoutMs: 90_000,
			what: "the app to serve",
		});
		assert.match(out, /registry serving/, out);
		if (process.platform === "linux") {
			const maps = readFileSync(`/proc/${child.pid}/maps`, "utf8");
			assert.ok(
				maps.includes(`/node_modules/${platformPackage}/${binaryFile}`),
				"the app runs on the installed binary",
			);
		}

		// RivetKit's client, from the app's own install.
		const res = spawnSync(process.execPath, ["client.mjs", endpoint], {
			cwd: dir,
			env: noRustEnv,
			encoding: "utf8",
			timeout: 60_000,
		});
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
