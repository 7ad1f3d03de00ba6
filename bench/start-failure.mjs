// Failed starts per request when an actor's onWake always throws, on
// @rivetkit/rivetkit-napi@2.3.19 and on rivetkit-native, each with its own
// private engine. The app (bench/apps/failing-app.mjs) prints a line per
// start attempt; three requests are sent 3 s apart (after the previous
// failure has settled) through the gateway's get-or-create routing.
//
//   node bench/start-failure.mjs            # both
//   IMPLS=native node bench/start-failure.mjs
//
// Prints, per request: status, body, start attempts it cost, its latency.

import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

import { startEngine, upsertRunnerConfig, waitFor } from "../__test__/helpers/engine.mjs";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const results = [];

for (const impl of (process.env.IMPLS ?? "reference,native").split(",")) {
	const engine = await startEngine();
	let child;
	try {
		const pool = `failing-${impl}-${process.pid}`;
		await upsertRunnerConfig(engine.endpoint, pool);
		const hook = impl === "native" ? ["--import", here("./lib/use-rivetkit-native.mjs")] : [];
		child = spawn(process.execPath, [...hook, here("./apps/failing-app.mjs")], {
			env: {
				...process.env,
				RIVET_ENDPOINT: engine.endpoint,
				RIVET_NAMESPACE: "default",
				...(engine.token ? { RIVET_TOKEN: engine.token } : {}),
				RIVET_POOL: pool,
				RIVET_RUN_SERVICES: "0",
				RIVET_LOG_LEVEL: "warn",
				LOG_LEVEL: "warn",
			},
			stdio: ["ignore", "pipe", "pipe"],
		});
		const starts = [];
		let ready = false;
		let stderr = "";
		child.stdout.on("data", (d) => {
			for (const line of d.toString().split("\n")) {
				if (line.startsWith("START ")) starts.push(Number(line.split(" ")[2]));
				if (line.includes("READY")) ready = true;
			}
		});
		child.stderr.on("data", (d) => (stderr = (stderr + d).slice(-4000)));
		await waitFor(() => ready, { timeoutMs: 60_000, what: `${impl} app ready` }).catch((err) => {
			console.error(stderr);
			throw err;
		});
		await sleep(2000);
		const query = `rvt-namespace=default&rvt-method=getOrCreate&rvt-runner=${pool}&rvt-key=k&rvt-crash-policy=sleep`;
		const requests = [];
		for (let i = 0; i < 3; i++) {
			const before = starts.length;
			const t0 = Date.now();
			const res = await fetch(`${engine.endpoint}/gateway/failing/action/ping?${query}`, {
				method: "POST",
				headers: { "content-type": "application/json", "x-rivet-encoding": "json" },
				body: JSON.stringify({ args: [] }),
			});
			const body = await res.text();
			const ms = Date.now() - t0;
			await sleep(3000);
			requests.push({ status: res.status, body: body.slice(0, 240), starts: starts.length - before, ms });
		}
		results.push({ impl, requests, totalStarts: starts.length });
	} finally {
		child?.kill("SIGINT");
		await sleep(2000);
		child?.kill("SIGKILL");
		await engine.stop();
	}
}
console.log(JSON.stringify(results, null, 2));
