// `node bench/profile.mjs`: where a host's CPU goes during action loops.
//
// Starts the bench engine and one host of the comparison's RivetKit app
// (bench/apps/rivetkit-app.mjs), then runs sequential HTTP actions and
// sequential WebSocket actions, as bench/compare.mjs does, and prints for
// each loop the host's CPU per action split by thread (from
// /proc/<pid>/task: the JS thread, the addon's tokio workers, libuv's pool,
// V8's helpers). With PROFILE_CMD set, runs that command around each loop,
// e.g. a sampling profiler attached to the host:
//
//   PROFILE_CMD='perf record -e cpu-clock -F 2000 -g -p {pid} -o /tmp/{phase}.data' \
//   PROFILE_NODE_OPTIONS=--perf-basic-prof node bench/profile.mjs
//
// `{pid}` and `{phase}` (`http`, `ws`) are replaced; the command gets
// SIGINT when the loop ends. Knobs (environment): PROFILE_IMPL
// (rivetkit-native, or rivetkit-napi for the reference), PROFILE_HTTP=1000,
// PROFILE_WS=3000, PROFILE_ORDER=http,ws, PROFILE_ENCODING=bare,
// PROFILE_RIVETKIT=2.3 (or 3: rivetkit 3.0.0 on engine 3.0, as
// bench/lib/stacks.mjs lays the versions out),
// PROFILE_NODE_OPTIONS (node
// options of the host only), BENCH_ADDON as in bench/run.mjs.

import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

import { startBenchEngine, upsertRunnerConfig } from "./lib/engine.mjs";
import { spawnHost } from "./lib/host.mjs";
import { int } from "./lib/knobs.mjs";
import { run } from "./lib/load.mjs";
import { loadStack, stackKeys } from "./lib/stacks.mjs";
import { fmt, summarize, table } from "./lib/stats.mjs";

const impl = process.env.PROFILE_IMPL ?? "rivetkit-native";
const counts = { http: int("PROFILE_HTTP", 1000), ws: int("PROFILE_WS", 3000) };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * CPU ms by thread group of process `pid`: {name → ms}, and each group's
 * voluntary and involuntary context switches under "<name> switches".
 */
function threadCpu(pid) {
	const out = {};
	const add = (key, value) => (out[key] = (out[key] ?? 0) + value);
	for (const tid of readdirSync(`/proc/${pid}/task`)) {
		try {
			const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
			const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
			const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
			const ms = (Number(fields[11]) + Number(fields[12])) * 10;
			const group = Number(tid) === pid ? "JS thread" : name.replace(/[0-9]+$/, "N");
			add(group, ms);
			const status = readFileSync(`/proc/${pid}/task/${tid}/status`, "utf8");
			const count = (field) => Number(new RegExp(`^${field}:\\s+(\\d+)`, "m").exec(status)?.[1] ?? 0);
			add(`${group} switches`, count("voluntary_ctxt_switches"));
			add(`${group} preempted`, count("nonvoluntary_ctxt_switches"));
		} catch {}
	}
	return out;
}

/** Starts PROFILE_CMD for `phase` (or nothing); returns a stop function. */
async function startProfiler(pid, phase) {
	const template = process.env.PROFILE_CMD;
	if (!template) return async () => {};
	const command = template.replaceAll("{pid}", String(pid)).replaceAll("{phase}", phase);
	const child = spawn("sh", ["-c", `exec ${command}`], { stdio: ["ignore", "inherit", "inherit"] });
	const exited = new Promise((r) => child.once("exit", r));
	await sleep(500);
	return async () => {
		child.kill("SIGINT");
		await exited;
	};
}

const [stackKey] = stackKeys(process.env.PROFILE_RIVETKIT ?? "2.3");
const stack = await loadStack(stackKey);
const engine = await startBenchEngine({ arch: stack.engineArch });
const pool = `profile-${process.pid}`;
let host;
let client;
try {
	await upsertRunnerConfig(engine, pool);
	client = stack.createClient({
		endpoint: engine.endpoint,
		namespace: "default",
		token: engine.token,
		poolName: pool,
		encoding: process.env.PROFILE_ENCODING ?? "bare",
	});
	const env = process.env.PROFILE_NODE_OPTIONS ? { NODE_OPTIONS: process.env.PROFILE_NODE_OPTIONS } : {};
	host = spawnHost({ impl, endpoint: engine.endpoint, pool, token: engine.token, rivetkit: stack.key, env });
	await host.ready;
	const first = client.counter.getOrCreate(["profile"]);
	await first.increment(1);
	const byId = client.counter.getForId(await first.resolve());
	const conn = first.connect();
	const loops = { http: () => byId.increment(1), ws: () => conn.increment(1) };
	const rows = [];
	for (const phase of (process.env.PROFILE_ORDER ?? "http,ws").split(",")) {
		for (let i = 0; i < 50; i++) await loops[phase]();
		const stop = await startProfiler(host.pid, phase);
		const before = threadCpu(host.pid);
		const cpuBefore = await host.cpu();
		const result = await run({ total: counts[phase], inFlight: 1, deadlineMs: 120_000 }, loops[phase]);
		const cpuAfter = await host.cpu();
		const after = threadCpu(host.pid);
		await stop();
		const n = result.latencies.length;
		const total = cpuAfter.userMs + cpuAfter.systemMs - cpuBefore.userMs - cpuBefore.systemMs;
		const { p50 } = summarize(result.latencies);
		rows.push({ figure: `${phase}: actions (errors)`, value: `${n} (${result.errors.length})` });
		rows.push({ figure: `${phase}: client p50 ms`, value: fmt(p50, 2) });
		rows.push({ figure: `${phase}: host CPU ms per action`, value: fmt(total / n, 3) });
		rows.push({
			figure: `${phase}: of which user / system`,
			value: `${fmt((cpuAfter.userMs - cpuBefore.userMs) / n, 3)} / ${fmt((cpuAfter.systemMs - cpuBefore.systemMs) / n, 3)}`,
		});
		const groups = Object.keys(after).filter((k) => !k.endsWith(" switches") && !k.endsWith(" preempted"));
		for (const group of groups.sort((a, b) => after[b] - after[a])) {
			const used = after[group] - (before[group] ?? 0);
			const delta = (key) => (after[key] - (before[key] ?? 0)) / n;
			const switches = `${fmt(delta(`${group} switches`), 2)} + ${fmt(delta(`${group} preempted`), 2)} preempted`;
			if (used > 0)
				rows.push({ figure: `${phase}:   ${group} (ms, context switches)`, value: `${fmt(used / n, 3)}, ${switches}` });
		}
	}
	await conn.dispose();
	console.log(`host ${impl}, pid ${host.pid}; ${stack.title}`);
	console.log(
		table(
			["figure", "value"],
			rows.map((r) => ({ figure: r.figure, value: r.value })),
		),
	);
} finally {
	await client?.dispose();
	await host?.kill();
	await engine.stop();
}
