// The Rivet Engine processes on this machine, read from /proc (Linux; none
// are found elsewhere), for the tests that let the addon start an engine
// (it outlives its host on purpose) and for the suite's end-of-run check
// (scripts/test-js.mjs): which engines a test started, found by its
// storage directory, and stopped by their pids. Also the processes a
// helper starts itself (the clusters' databases, stores and engine nodes):
// `ownProcess` spawns one detached with its output in a log file, and every
// child registered with `killOnExit` is SIGKILLed if the test process exits
// first.
//
//   after(async () => {
//     await stopEnginesUnder(storage);   // SIGTERM, then SIGKILL after the bound
//     rmSync(storage, { recursive: true, force: true });
//   });

import { spawn } from "node:child_process";
import { once } from "node:events";
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { basename } from "node:path";

const ENGINE = /^rivet-engine(\.exe)?$/;

/** `/proc/<pid>/<file>` as text, or null when it cannot be read (gone, another user's). */
function procFile(pid, file) {
	try {
		return readFileSync(`/proc/${pid}/${file}`, "utf8");
	} catch {
		return null;
	}
}

/**
 * Every rivet-engine process: `{pid, exe, argv, env}` (`exe` the binary's
 * path, `argv` its arguments, `env` its environment as an object, or null
 * when it cannot be read).
 */
export function engineProcesses() {
	if (process.platform !== "linux") return [];
	const found = [];
	for (const entry of readdirSync("/proc")) {
		if (!/^\d+$/.test(entry)) continue;
		const cmdline = procFile(entry, "cmdline");
		if (!cmdline) continue;
		const argv = cmdline.split("\0").filter(Boolean);
		let exe = null;
		try {
			exe = readlinkSync(`/proc/${entry}/exe`);
		} catch {}
		if (!ENGINE.test(basename(exe ?? "")) && !ENGINE.test(basename(argv[0] ?? ""))) continue;
		const environ = procFile(entry, "environ");
		const env = environ === null ? null : {};
		for (const pair of environ?.split("\0") ?? []) {
			const at = pair.indexOf("=");
			if (at > 0) env[pair.slice(0, at)] = pair.slice(at + 1);
		}
		found.push({ pid: Number(entry), exe: exe ?? argv[0], argv, env });
	}
	return found;
}

/** Whether engine process `p` names `dir` in its binary, arguments or environment (data and config paths). */
export function engineUses(p, dir) {
	return (
		p.exe.startsWith(dir) ||
		p.argv.some((a) => a.includes(dir)) ||
		Object.values(p.env ?? {}).some((v) => v.includes(dir))
	);
}

/** The rivet-engine processes whose paths lie under `dir` (its storage, its data directory). */
export function enginesUnder(dir) {
	return engineProcesses().filter((p) => engineUses(p, dir));
}

/** Whether `pid` still runs (a zombie, exited but not reaped yet, does not). */
function alive(pid) {
	try {
		process.kill(pid, 0);
	} catch {
		return false;
	}
	const stat = procFile(pid, "stat");
	return stat?.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
}

/** SIGTERM to each pid, SIGKILL to those still running after `timeoutMs`; resolves once all are gone. */
export async function stopPids(pids, { timeoutMs = 10_000 } = {}) {
	for (const pid of pids) {
		try {
			process.kill(pid, "SIGTERM");
		} catch {}
	}
	const deadline = Date.now() + timeoutMs;
	while (pids.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
	for (const pid of pids.filter(alive)) {
		try {
			process.kill(pid, "SIGKILL");
		} catch {}
	}
	const killed = Date.now() + 5_000;
	while (pids.some(alive) && Date.now() < killed) await new Promise((r) => setTimeout(r, 20));
}

/**
 * Stops every engine whose paths lie under `dir` (SIGTERM, SIGKILL after
 * `timeoutMs`); resolves to their pids. A test that let the addon start an
 * engine with its storage in `dir` (RIVETKIT_STORAGE_PATH) calls this in
 * its `after()`: the addon leaves that engine running for the next start.
 */
export async function stopEnginesUnder(dir, { timeoutMs = 10_000 } = {}) {
	if (!dir) return [];
	const pids = enginesUnder(dir).map((p) => p.pid);
	await stopPids(pids, { timeoutMs });
	return pids;
}

/** Whether process `pid` exists (signal 0 checks without sending anything). */
export function isAlive(pid) {
	try {
		process.kill(pid, 0);
		return true;
	} catch {
		return false;
	}
}

/** Children registered with `killOnExit` that have not exited. */
const live = new Set();
process.on("exit", () => {
	for (const child of live) {
		try {
			child.kill("SIGKILL");
		} catch {}
	}
});

/** SIGKILLs `child` if this process exits before it does. */
export function killOnExit(child) {
	live.add(child);
	child.once("exit", () => live.delete(child));
}

/** The last `lines` lines of the file at `path` ("" when there is none). */
export function logTail(path, lines = 30) {
	return existsSync(path) ? readFileSync(path, "utf8").split("\n").slice(-lines).join("\n") : "";
}

/**
 * Spawns `file` in a process group of its own (a terminal's Ctrl-C does not
 * reach it), its output appended to `log`, SIGKILLed if this process exits
 * first. Returns `{pid, exited, stop(signal, killAfterMs)}`: `exited` is
 * `{code, signal}` once it exited (else null); `stop` sends `signal`, then
 * SIGKILL after `killAfterMs`, and resolves to `exited`.
 */
export function ownProcess(file, args, { env, log, cwd, user = {}, killAfterMs = 5_000 }) {
	const fd = openSync(log, "a");
	const child = spawn(file, args, { env, cwd, stdio: ["ignore", fd, fd], detached: true, ...user });
	closeSync(fd);
	killOnExit(child);
	const state = { exited: null };
	const exit = once(child, "exit").then(([code, signal]) => {
		state.exited = { code, signal };
	});
	return {
		pid: child.pid,
		get exited() {
			return state.exited;
		},
		async stop(signal = "SIGTERM", wait = killAfterMs) {
			if (state.exited) return state.exited;
			child.kill(signal);
			const timer = setTimeout(() => !state.exited && child.kill("SIGKILL"), wait);
			await exit;
			clearTimeout(timer);
			return state.exited;
		},
	};
}
