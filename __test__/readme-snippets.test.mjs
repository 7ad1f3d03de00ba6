// The README's runnable snippets, run as written: a newcomer's first hour
// (packing the tarballs, installing them, the direct-use server, a RivetKit
// app and its client) on an embedded engine on a private port.
//
// Convention: a snippet is runnable when the line right before its fence is
// `<!-- snippet: <name> -->`. Every name marked in README.md must be one this
// test knows (SNIPPETS below) and every known one must be marked, so a new
// runnable snippet needs its runner here, and a renamed or dropped one fails
// the test. The text of a snippet is used as it is: `sh` snippets run with
// `bash -e` in their directory, `js`/`json` snippets are written to the file
// the README names. What the test changes is the environment only:
//
// - RIVET_ENDPOINT and RIVET_RUN_ENGINE_PORT name a free private port, and
//   RIVETKIT_STORAGE_PATH a temporary directory (the engine's data and logs).
//   The RivetKit 3.0 app's server runs without RIVET_ENDPOINT: RivetKit 3.0
//   starts the embedded engine only when no endpoint is configured, on
//   RIVET_RUN_ENGINE_PORT (its client still reads RIVET_ENDPOINT);
// - `app-install` runs with npm_config_ignore_scripts=true: RivetKit's own
//   dependencies' install scripts (better-sqlite3 compiles from source, about
//   a minute) are not ours, and the app runs without them. The install
//   scripts of our package are packaging.test.mjs's business.
//
// The directories are laid out as the README assumes: `rivetkit-native/` is
// a clone (the package's files, scripts/pack-manifest.mjs for its prepack,
// and npm/<platform>/ with the built binary), `my-server/` and `my-app/` sit
// next to it. Needs the built binary in npm/<platform>/ (else the root's).

import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";

import { BINARY_NAME, hostPlatform } from "../scripts/platform.mjs";
import { createActor, findFreePorts, gatewayFetch, waitFor } from "./helpers/engine.mjs";
import { enginesUnder, stopEnginesUnder } from "./helpers/processes.mjs";

const EXIT_BOUND_MS = 10_000;
const root = fileURLToPath(new URL("..", import.meta.url));
const readme = readFileSync(join(root, "README.md"), "utf8");
const rootPackage = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const platform = hostPlatform();
const binaryFile = `${BINARY_NAME}.${platform}.node`;
const binary = [join(root, "npm", platform, binaryFile), join(root, binaryFile)].find((f) => existsSync(f));

/** Every runnable snippet: its language, its directory, and for files their name. */
const SNIPPETS = {
	pack: { lang: "sh", dir: "rivetkit-native" },
	"install-direct": { lang: "sh", dir: "my-server" },
	"direct-server": { lang: "js", dir: "my-server", file: "server.mjs" },
	"app-package": { lang: "json", dir: "my-app", file: "package.json" },
	"app-install": { lang: "sh", dir: "my-app", env: { npm_config_ignore_scripts: "true" } },
	"app-server": { lang: "js", dir: "my-app", file: "server.mjs" },
	"app-client": { lang: "js", dir: "my-app", file: "client.mjs" },
};

/** The marked snippets of the README: `{name: {lang, text}}`; throws on a mark without a fence. */
function markedSnippets(text) {
	const found = {};
	for (const m of text.matchAll(/<!-- snippet: ([\w-]+) -->\n(```(\w*)\n([\s\S]*?)\n```)?/g)) {
		const [, name, fence, lang, body] = m;
		if (!fence) throw new Error(`snippet mark "${name}" is not followed by a fence`);
		if (found[name]) throw new Error(`snippet "${name}" is marked twice`);
		found[name] = { lang, text: `${body}\n` };
	}
	return found;
}

// The snippets name this platform's package (linux-x64-gnu).
const skip = !binary
	? `no ${binaryFile} built`
	: platform !== "linux-x64-gnu"
		? `the README's snippets name linux-x64-gnu, this is ${platform}`
		: false;

describe("README snippets, run as written", { skip }, () => {
	const work = mkdtempSync(join(tmpdir(), "rivetkit-native-readme-"));
	const storage = join(work, "storage");
	const snippets = markedSnippets(readme);
	const children = [];
	let port;
	let env;
	let enginePid = 0;

	before(async () => {
		port = (await findFreePorts()).guard;
		env = {
			...process.env,
			RIVET_ENDPOINT: `http://127.0.0.1:${port}`,
			RIVET_RUN_ENGINE_PORT: String(port),
			RIVETKIT_STORAGE_PATH: storage,
			RIVET_LOG_LEVEL: "info",
		};
		// The clone, as far as packing needs it.
		const clone = join(work, "rivetkit-native");
		mkdirSync(join(clone, "scripts"), { recursive: true });
		for (const f of ["package.json", "README.md", ...rootPackage.files])
			cpSync(join(root, f), join(clone, f), { recursive: true });
		copyFileSync(join(root, "scripts", "pack-manifest.mjs"), join(clone, "scripts", "pack-manifest.mjs"));
		const platformDir = join(clone, "npm", platform);
		mkdirSync(platformDir, { recursive: true });
		for (const f of ["package.json", "README.md"]) {
			if (existsSync(join(root, "npm", platform, f)))
				copyFileSync(join(root, "npm", platform, f), join(platformDir, f));
		}
		copyFileSync(binary, join(platformDir, binaryFile));
		for (const dir of ["my-server", "my-app"]) mkdirSync(join(work, dir));
	});

	after(async () => {
		for (const child of children) {
			if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
		}
		// An engine a failed test left behind.
		if (enginePid) {
			try {
				process.kill(enginePid, "SIGKILL");
			} catch {}
		}
		// Any other engine with its storage here (a pid the log did not show).
		await stopEnginesUnder(work);
		rmSync(work, { recursive: true, force: true });
	});

	/** Runs or writes snippet `name` as SNIPPETS says; returns a shell snippet's output. */
	function snippet(name) {
		const spec = SNIPPETS[name];
		const { lang, text } = snippets[name];
		const dir = join(work, spec.dir);
		if (spec.file) {
			writeFileSync(join(dir, spec.file), text);
			return "";
		}
		const res = spawnSync("bash", ["-e", "-c", text], { cwd: dir, env: { ...env, ...spec.env }, encoding: "utf8" });
		assert.equal(res.status, 0, `snippet ${name} (${lang}) failed:\n${text}\n${res.stdout}\n${res.stderr}`);
		return res.stdout;
	}

	/**
	 * Starts `node <file>` in `dir` (without RIVET_ENDPOINT if
	 * `withoutEndpoint`); resolves once it logged "registry serving".
	 */
	async function startServer(dir, file, { withoutEndpoint = false } = {}) {
		const { RIVET_ENDPOINT: _endpoint, ...rest } = env;
		const child = spawn(process.execPath, [file], {
			cwd: join(work, dir),
			env: withoutEndpoint ? rest : env,
			stdio: ["ignore", "pipe", "pipe"],
		});
		children.push(child);
		const server = { child, out: "", exited: once(child, "exit") };
		child.stdout.on("data", (d) => (server.out += d));
		child.stderr.on("data", (d) => (server.out += d));
		await waitFor(() => child.exitCode !== null || /registry serving/.test(server.out), {
			timeoutMs: 90_000,
			what: `${dir}/${file} to serve`,
		});
		assert.match(server.out, /registry serving/, server.out);
		enginePid ||= Number(server.out.match(/engine ready after .*pid=(\d+)/)?.[1]) || 0;
		return server;
	}

	/** SIGINT, as Ctrl-C; resolves to `[code, signal]` (SIGKILL after the bound). */
	async function interrupt(server) {
		server.child.kill("SIGINT");
		const timer = setTimeout(() => server.child.kill("SIGKILL"), EXIT_BOUND_MS);
		const result = await server.exited;
		clearTimeout(timer);
		return result;
	}

	test("the marked snippets are the ones this test runs", () => {
		assert.deepEqual(Object.keys(snippets).sort(), Object.keys(SNIPPETS).sort());
		for (const [name, { lang }] of Object.entries(SNIPPETS))
			assert.equal(snippets[name].lang, lang, `${name} is a ${lang} snippet`);
	});

	test("pack: the two tarballs", () => {
		snippet("pack");
		for (const tgz of [
			`${rootPackage.name}-${rootPackage.version}.tgz`,
			`${BINARY_NAME}-${platform}-${rootPackage.version}.tgz`,
		]) {
			assert.ok(existsSync(join(work, "rivetkit-native", tgz)), `${tgz} packed`);
		}
		const manifest = JSON.parse(
			execFileSync(
				"tar",
				[
					"-xOzf",
					join(work, "rivetkit-native", `${rootPackage.name}-${rootPackage.version}.tgz`),
					"package/package.json",
				],
				{
					encoding: "utf8",
				},
			),
		);
		assert.equal(manifest.scripts?.prepare, undefined, "packed without prepare");
	});

	test("direct use: install both tarballs, serve the counter, Ctrl-C", async () => {
		snippet("install-direct");
		snippet("direct-server");
		const server = await startServer("my-server", "server.mjs");
		const actor = await createActor(env.RIVET_ENDPOINT, { name: "counter", key: "readme", pool: "my-app" });
		// Raw requests reach onRequest under /request (docs/wire-formats.md).
		const res = await gatewayFetch(env.RIVET_ENDPOINT, actor.actor_id, "/request/");
		assert.equal(res.status, 200, server.out);
		assert.deepEqual(await res.json(), { count: 0 });
		assert.ok(server.out.includes(`awake ${actor.actor_id}`), server.out);
		// The snippet's handler calls shutdown(); serve() settles after the drain.
		const [code, signal] = await interrupt(server);
		assert.equal(signal, null, server.out);
		assert.equal(code, 0, server.out);
	});

	test("a RivetKit app from the tarballs: its package.json, npm install, server, client, Ctrl-C", async () => {
		snippet("app-package");
		snippet("app-install");
		const napi = JSON.parse(
			readFileSync(join(work, "my-app", "node_modules", "@rivetkit", "rivetkit-napi", "package.json"), "utf8"),
		);
		assert.equal(napi.name, rootPackage.name, "@rivetkit/rivetkit-napi is rivetkit-native");
		assert.ok(
			!existsSync(join(work, "my-app", "node_modules", "rivetkit", "node_modules", "@rivetkit", "rivetkit-napi")),
			"no nested real one",
		);
		snippet("app-server");
		snippet("app-client");

		const server = await startServer("my-app", "server.mjs", { withoutEndpoint: true });
		if (process.platform === "linux") {
			const maps = readFileSync(`/proc/${server.child.pid}/maps`, "utf8");
			assert.ok(
				maps.includes(`/my-app/node_modules/${BINARY_NAME}-${platform}/${binaryFile}`),
				"the app runs on the installed binary",
			);
		}
		const res = spawnSync(process.execPath, ["client.mjs"], {
			cwd: join(work, "my-app"),
			env,
			encoding: "utf8",
			timeout: 60_000,
		});
		assert.equal(res.status, 0, `${res.stdout}\n${res.stderr}\n--- app ---\n${server.out}`);
		assert.equal(res.stdout.trim().split("\n").pop(), "5");

		assert.equal(enginesUnder(work).length, 1, "the app started its engine");
		const [code, signal] = await interrupt(server);
		assert.ok(signal === "SIGINT" || code === 130, `exits on SIGINT, got ${code}/${signal}\n${server.out}`);
		// The engine the app started stopped with it.
		await waitFor(() => enginesUnder(work).length === 0, { what: "the app's engine to stop with it" });
	});
});
