#!/usr/bin/env node
// The JS end-to-end suite (`npm run test:js`, part of `npm test`): every
// `__test__/*.test.mjs` file under this machine's Node, and the files that
// touch the addon's JS surface once more under Node 22 (./node22.mjs), as
// one pool of jobs that run side by side.
//
// Why files in parallel: most of a file's time is spent waiting on the
// engine's own timers (sleep timeouts, alarms, lost thresholds), not on a
// core. Each file starts its own engine on private ports with its own data
// directory (helpers/engine.mjs), so files share nothing but the machine.
//
//   node scripts/test-js.mjs [file ...]        the suite, or the given files
//   node scripts/test-js.mjs --repeat N        N rounds; every failure is
//                                              listed with its round, file and test
//
// Environment:
//   RIVETKIT_TEST_JOBS     files at once (default 4)
//   RIVETKIT_TEST_NODE22   0: skip the Node 22 pass; all: every file under Node 22 too
//   RIVETKIT_TEST_LOGS     directory for each job's full output (default target/test-logs)
//   RIVETKIT_TEST_ENGINE_ARCH  v3 (default) or v2: the engine of startEngine() without an arch
//   RIVETKIT_TEST_RIVETKIT     2 (default) or 3: the example app of startApp() without a version
//
// A file's output is printed only when it failed (its whole TAP stream);
// each finished file gets one line. The run ends with "N passed, N failed"
// counted over the tests of every job, and exits 1 if any job failed.
//
// No engine outlives the run. Every job's environment carries the run's
// id and the file's name (RIVETKIT_TEST_RUN, RIVETKIT_TEST_FILE), which
// every engine it starts inherits (the harness's, and those the addon
// starts), and a RIVETKIT_STORAGE_PATH in the run's temporary directory
// (unless one is set), so that an engine the addon starts for a test that
// named no storage keeps its data there, not in ~/.rivetkit. After the
// pool, any rivet-engine process started during the run that carries this
// run's id, or none but runs a binary or uses a directory of this checkout
// or of the tests' temporary directories, is listed with the file that
// started it and fails the run; those with the run's id are stopped.

import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { TEMP_PREFIX } from "../__test__/helpers/engine.mjs";
import { engineProcesses, engineUses, stopPids } from "../__test__/helpers/processes.mjs";
import { node22, NODE22_LEFT_OUT } from "./node22.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const repeatAt = args.indexOf("--repeat");
const rounds = repeatAt >= 0 ? Number(args.splice(repeatAt, 2)[1]) : 1;
if (!Number.isInteger(rounds) || rounds < 1) throw new Error("--repeat takes a whole number of rounds");
const jobs = Number(process.env.RIVETKIT_TEST_JOBS || 4);
if (!Number.isInteger(jobs) || jobs < 1) throw new Error("RIVETKIT_TEST_JOBS must be a whole number of at least 1");
const logDir = process.env.RIVETKIT_TEST_LOGS || join(root, "target", "test-logs");
mkdirSync(logDir, { recursive: true });

const testDir = join(root, "__test__");
const allFiles = readdirSync(testDir)
	.filter((name) => name.endsWith(".test.mjs"))
	.sort();
const files = args.length ? args.map((a) => basename(a)) : allFiles;

/** This run's id, in every job's environment and so in every engine a job starts. */
const runId = `${process.pid}-${Date.now()}`;
/** The run's temporary directory: the default engine storage of its jobs. */
const runTemp = mkdtempSync(join(tmpdir(), `${TEMP_PREFIX}test-run-`));
/** The engines already running when the run began: not the run's. */
const enginesBefore = new Set(engineProcesses().map((p) => p.pid));

/**
 * Seconds each file took in a fresh clone's `npm test` here (rounded; the
 * slower of its Node 20 and Node 22 runs): the pool
 * starts the longest first, so that the run is not left waiting on one
 * long file at its end. A file not listed counts as 5 s.
 */
const SECONDS = {
	"cluster-safety.test.mjs": 165,
	"queue-commit.test.mjs": 330,
	"cluster.test.mjs": 160,
	"cluster-3.test.mjs": 90,
	"drain.test.mjs": 125,
	"packaging.test.mjs": 70,
	"serverless.test.mjs": 45,
	"readme-snippets.test.mjs": 40,
	"cron.test.mjs": 30,
	"concurrency.test.mjs": 27,
	"workflow.test.mjs": 41,
	"compat.test.mjs": 26,
	"sqlite.test.mjs": 42,
	"reliability.test.mjs": 22,
	"rivetkit-app.test.mjs": 25,
	"drain-bound.test.mjs": 21,
	"raw-websocket.test.mjs": 20,
	"lifecycle.test.mjs": 16,
	"inspector.test.mjs": 16,
	"start-failure.test.mjs": 16,
	"persistence.test.mjs": 15,
	"schedule.test.mjs": 10,
	"streams.test.mjs": 9,
	"first-run.test.mjs": 8,
	"runtime-socket.test.mjs": 8,
	"recovery.test.mjs": 8,
	"connect-frames.test.mjs": 7,
	"queue.test.mjs": 7,
	"actions.test.mjs": 7,
};
const weight = (file) => SECONDS[file] ?? 5;

/**
 * Files run alone, after the pool (none now: serverless.test.mjs was, until
 * its intermittent failure turned out to be the test proxy's, docs/testing.md).
 */
const ALONE = new Set([]);

/** Runs one file under `nodeBin`; resolves to its outcome. */
function runFile(nodeBin, label, file, round) {
	const started = Date.now();
	return new Promise((resolve) => {
		const child = spawn(nodeBin, ["--test", "--test-reporter=tap", join(testDir, file)], {
			cwd: root,
			env: {
				...process.env,
				PATH: `${dirname(nodeBin)}:${process.env.PATH}`,
				RIVETKIT_TEST_RUN: runId,
				RIVETKIT_TEST_FILE: `${label} ${file}`,
				RIVETKIT_STORAGE_PATH: process.env.RIVETKIT_STORAGE_PATH || join(runTemp, "storage"),
			},
			stdio: ["ignore", "pipe", "pipe"],
		});
		let out = "";
		child.stdout.on("data", (d) => (out += d));
		child.stderr.on("data", (d) => (out += d));
		child.on("close", (code, signal) => {
			const count = (what) => Number(out.match(new RegExp(`^# ${what} (\\d+)$`, "m"))?.[1] ?? 0);
			const failedTests = [...out.matchAll(/^\s*not ok \d+ - (.*)$/gm)].map((m) => m[1]);
			const result = {
				label,
				file,
				round,
				code,
				signal,
				seconds: (Date.now() - started) / 1000,
				passed: count("pass"),
				failed: count("fail") + count("cancelled"),
				failedTests,
				out,
			};
			// A file that died before its summary is a failure even with no test counted.
			if ((code !== 0 || signal) && result.failed === 0) result.failed = 1;
			const log = join(logDir, `${round}-${label}-${file.replace(/\.test\.mjs$/, "")}.log`);
			writeFileSync(log, out);
			result.log = log;
			resolve(result);
		});
	});
}

/**
 * The engines the run left behind: started during the run, and carrying
 * its id, or no id at all but a binary or directory of this checkout or of
 * the tests' temporary directories. Those of another run (its own id: a
 * second suite in this checkout) are its business. An engine still
 * stopping on its own (its host's exit stops it) gets `graceMs`.
 */
async function leftBehind({ graceMs = 12_000 } = {}) {
	const tempDirs = join(tmpdir(), TEMP_PREFIX);
	const find = () =>
		engineProcesses().filter((p) => {
			if (enginesBefore.has(p.pid)) return false;
			const run = p.env?.RIVETKIT_TEST_RUN;
			if (run) return run === runId;
			return engineUses(p, root) || engineUses(p, tempDirs) || engineUses(p, runTemp);
		});
	const deadline = Date.now() + graceMs;
	let found = find();
	while (found.length && Date.now() < deadline) {
		await new Promise((r) => setTimeout(r, 250));
		found = find();
	}
	return found;
}

/**
 * Lists and counts the engines the run left behind, and stops those that
 * carry the run's id. One without an id is listed but left running: it may
 * be a person's own engine started from this checkout meanwhile.
 */
async function checkEngines() {
	const left = await leftBehind();
	if (left.length) {
		console.log(`\n${left.length} rivet-engine process(es) outlived the test that started them:`);
		for (const p of left) {
			const data = Object.entries(p.env ?? {})
				.filter(([k]) => /^RIVET__(FILE_SYSTEM__PATH|STORAGE__LOG_DIRECTORY|OBJECT_STORAGE__.*PATH)$/.test(k))
				.map(([k, v]) => `${k}=${v}`);
			const by = p.env?.RIVETKIT_TEST_FILE ?? "no test of this run (no run id; left running)";
			console.log(`  pid ${p.pid}, started by ${by}: ${p.argv.join(" ")}${data.map((d) => `\n    ${d}`).join("")}`);
		}
		const ours = left.filter((p) => p.env?.RIVETKIT_TEST_RUN === runId).map((p) => p.pid);
		await stopPids(ours, { timeoutMs: 10_000 });
		if (ours.length) console.log(`  stopped now: ${ours.join(", ")}`);
	}
	rmSync(runTemp, { recursive: true, force: true });
	return left.length;
}

async function main() {
	const suiteStart = Date.now();
	const n22 = await node22();
	if (n22.skipped) console.log(`JS tests under Node 22: skipped (${n22.skipped})`);
	const under22 = n22.bin
		? files.filter(
				(f) => process.env.RIVETKIT_TEST_NODE22 === "all" || !NODE22_LEFT_OUT.has(f.replace(/\.test\.mjs$/, "")),
			)
		: [];
	const own = `node${process.versions.node.split(".")[0]}`;
	console.log(
		`JS tests: ${files.length} files under Node ${process.versions.node}` +
			(n22.bin ? `, ${under22.length} under Node ${n22.version}` : "") +
			`, ${jobs} at a time${rounds > 1 ? `, ${rounds} rounds` : ""}`,
	);

	const results = [];
	for (let round = 1; round <= rounds; round++) {
		const queue = [
			...files.map((file) => ({ bin: process.execPath, label: own, file })),
			...under22.map((file) => ({ bin: n22.bin, label: "node22", file })),
		].sort((a, b) => weight(b.file) - weight(a.file));
		const roundStart = Date.now();
		const worker = async () => {
			for (let job = queue.shift(); job; job = queue.shift()) {
				const r = await runFile(job.bin, job.label, job.file, round);
				results.push(r);
				const mark = r.failed ? "FAIL" : "ok  ";
				console.log(
					`${mark} ${r.label} ${r.file} ${r.seconds.toFixed(1)} s (${r.passed} passed, ${r.failed} failed)` +
						(rounds > 1 ? ` [round ${round}]` : ""),
				);
				if (r.failed) {
					console.log(
						`---- output of ${r.label} ${r.file} (also in ${r.log}) ----\n${r.out}\n---- end of ${r.file} ----`,
					);
				}
			}
		};
		const alone = queue.filter((job) => ALONE.has(job.file));
		queue.splice(0, queue.length, ...queue.filter((job) => !ALONE.has(job.file)));
		await Promise.all(Array.from({ length: jobs }, worker));
		queue.push(...alone);
		await worker();
		if (rounds > 1) console.log(`round ${round}: ${((Date.now() - roundStart) / 1000).toFixed(0)} s`);
	}

	const failures = results.filter((r) => r.failed);
	const passed = results.reduce((s, r) => s + r.passed, 0);
	const failed = results.reduce((s, r) => s + r.failed, 0);
	console.log(`\nJS suite: ${((Date.now() - suiteStart) / 1000).toFixed(0)} s in all`);
	if (failures.length) {
		console.log("failures:");
		for (const r of failures) {
			const tests = r.failedTests.length ? r.failedTests.join("; ") : `exit ${r.code ?? r.signal}`;
			console.log(`  round ${r.round} ${r.label} ${r.file}: ${tests}`);
		}
	}
	const leftEngines = await checkEngines();
	const engines = leftEngines ? `, ${leftEngines} engine(s) left behind` : "";
	console.log(`${passed} passed, ${failed} failed${engines}`);
	process.exit(failures.length || leftEngines ? 1 : 0);
}

await main();
