// Test harness: a real Rivet Engine 3.0 cluster on loopback (docs/deploy.md,
// "An engine 3.0 cluster"; docs/testing.md, "The engine 3.0 cluster").
// Engine 3.0 has no PostgreSQL and no NATS: every node keeps its own
// storage log directory, all nodes share one S3-compatible object store,
// and they talk over their api-peer ports. Here:
//
// - the object store is `moto_server` (PyPI `moto[server]`, installed by
//   `npm install`, scripts/dev-setup.mjs) on a private port with its
//   temporary files in the cluster's directory, and one bucket;
// - the engines reach it through a TCP gate of this process on a port of
//   its own, so that `objectStore.stop()` / `start()` take the store away
//   and give it back (its port refuses connections meanwhile) without
//   losing what it holds: moto keeps its objects in memory, and a stopped
//   moto would come back empty;
// - three engine 3.0 nodes (`engineEnv({arch: "v3"})`'s settings, but the
//   shared S3 store instead of a file-system one, `AWS_ALLOW_HTTP=true`,
//   and no automatic provisioning), then the storage partition provisioned
//   over the three with `rivet-engine storage partition provision`.
//
//   const cluster = await startCluster3();
//   try {
//     await upsertPool(cluster.nodes[0].endpoint, "pool");
//     const holder = await cluster.holder();  // the node maintaining the partition
//     await holder.kill();                    // SIGKILL
//     await holder.start();                   // again, same ports and log directory
//     await cluster.objectStore.stop(); await cluster.objectStore.start();
//   } finally {
//     await cluster.stop();                   // every process it started, by pid
//   }
//
// Which node holds what, as the engine tells it (never guessed): each node
// logs `selected storage worker identity worker_id=...` at start;
// `rivet-engine storage partition show` names the partition's `maintainer`
// (a worker id) and `storage coordinator show` the coordinator's `holder`.

import { execFile, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

import { ADMIN_TOKEN, engineConfig, engineEnv, enginePath, findFreePorts, TEMP_PREFIX, waitFor } from "./engine.mjs";
import { faultProxy } from "./fault-proxy.mjs";
import { logTail, ownProcess } from "./processes.mjs";

const execFileP = promisify(execFile);

/** The bucket every node shares. */
const BUCKET = "rivet";
/** Engine 3.0 storage is ready once this lookup answers 200 (as in ./engine.mjs). */
const READINESS_PROBE = "/actors?name=rivetkit-readiness-probe&key=probe&namespace=default";

/** Whether `moto_server` is on PATH (see scripts/dev-setup.mjs). */
export function objectStoreAvailable() {
	return spawnSync("sh", ["-c", "command -v moto_server"], { stdio: "ignore" }).status === 0;
}

const progress = (line) => {
	if (process.env.CLUSTER_QUIET !== "1") console.error(`engine 3.0 cluster: ${line}`);
};

/** `moto_server` on a private port, its temporary files under `dir`, with the bucket made. */
async function startMoto(dir) {
	const port = (await findFreePorts()).guard;
	const log = join(dir, "moto.log");
	const tmp = join(dir, "moto-tmp");
	mkdirSync(tmp, { recursive: true });
	const proc = ownProcess("moto_server", ["-H", "127.0.0.1", "-p", String(port)], {
		env: { ...process.env, TMPDIR: tmp },
		log,
	});
	const url = `http://127.0.0.1:${port}`;
	await waitFor(
		async () => {
			if (proc.exited) throw new Error(`moto_server exited during start-up\n${logTail(log)}`);
			const res = await fetch(`${url}/`, { signal: AbortSignal.timeout(2_000) }).catch(() => null);
			return res !== null;
		},
		{ timeoutMs: 30_000, intervalMs: 100, what: "moto_server answering" },
	);
	// moto takes a plain PUT for a bucket (no signature needed).
	const res = await fetch(`${url}/${BUCKET}`, { method: "PUT" });
	if (!res.ok) throw new Error(`creating the bucket failed: ${res.status} ${await res.text()}`);
	return { port, url, log, pid: proc.pid, stop: () => proc.stop("SIGTERM", 5_000) };
}

/**
 * The object store behind a fault proxy on a port of its own
 * (helpers/fault-proxy.mjs): `stop()` resets every connection and closes
 * the port (connections are refused), `start()` listens on the same port
 * again.
 */
async function objectStoreGate(targetPort) {
	const proxy = await faultProxy(targetPort, "127.0.0.1", { port: (await findFreePorts()).guard });
	return { port: proxy.port, url: proxy.url, stop: () => proxy.down(), start: () => proxy.up() };
}

/** The engine binary's environment for a node and for the storage CLI. */
function nodeEnv({ ports, logDir }) {
	const env = {
		...engineEnv({ arch: "v3", host: "127.0.0.1", ...ports, dataDir: "unused" }),
		// Without it the engine never reaches a plain-HTTP object store.
		AWS_ALLOW_HTTP: "true",
		RIVET__STORAGE__LOG_DIRECTORY: logDir,
	};
	// The shared S3 store is in the config file; the storage partition is
	// provisioned over the three nodes once they run.
	delete env.RIVET__OBJECT_STORAGE__PRIMARY__FILE_SYSTEM__PATH;
	delete env.RIVET__STORAGE__AUTO_PROVISION_PARTITIONS;
	// The engine's own lost threshold (40 s): a dead partition holder stops
	// every storage write for about 30 s, and a shorter threshold would
	// declare every host lost in it (docs/deploy.md, "Thresholds").
	delete env.RIVET__PEGBOARD__NODE_LOST_THRESHOLD;
	const inherited = {};
	for (const [key, value] of Object.entries(process.env)) if (!key.startsWith("RIVET__")) inherited[key] = value;
	return { ...inherited, ...env };
}

/**
 * One engine 3.0 node: its own guard, api-peer and metrics ports and log
 * directory, the shared object store. `start()` (again: same ports, same
 * log directory, so the same storage worker), `stop()` (SIGTERM) and
 * `kill()` (SIGKILL).
 */
async function engineNode({ index, dir, store, env }) {
	const host = "127.0.0.1";
	const ports = await findFreePorts();
	const nodeDir = join(dir, `node-${index + 1}`);
	const logDir = join(nodeDir, "storage-log");
	mkdirSync(logDir, { recursive: true });
	const cliLogDir = join(nodeDir, "cli-storage-log");
	mkdirSync(cliLogDir, { recursive: true });
	const configPath = join(nodeDir, "engine.json");
	const config = {
		...engineConfig({ host, ...ports }),
		object_storage: {
			primary: {
				s3: {
					bucket: BUCKET,
					region: "us-east-1",
					endpoint: store.url,
					access_key_id: "test",
					secret_access_key: "test",
				},
			},
		},
	};
	writeFileSync(configPath, JSON.stringify(config, null, 2));
	const vars = { ...nodeEnv({ ports, logDir }), ...env };
	const log = join(nodeDir, "engine.log");
	let proc = null;
	let logFrom = 0;
	const endpoint = `http://${host}:${ports.guard}`;
	const node = {
		index,
		name: `node ${index + 1}`,
		endpoint,
		ports,
		log,
		configPath,
		cliLogDir,
		env: vars,
		/** The storage worker id this node logged at its latest start. */
		workerId: null,
		get pid() {
			return proc?.pid;
		},
		get running() {
			return Boolean(proc && !proc.exited);
		},
		logTail: () => logTail(log),
		/** Starts the node (if it is not running) and waits for `/health` and its worker id. */
		async start() {
			if (proc && !proc.exited) return;
			logFrom = existsSync(log) ? readFileSync(log).length : 0;
			proc = ownProcess(enginePath("v3"), ["--config", configPath], { env: vars, log, cwd: nodeDir });
			await waitFor(
				async () => {
					if (proc.exited) throw new Error(`engine ${node.name} exited during start-up\n${logTail(log)}`);
					const res = await fetch(`${endpoint}/health`, { signal: AbortSignal.timeout(1_000) }).catch(() => null);
					if (!res?.ok) return false;
					const id = /selected storage worker identity" worker_id=([0-9a-f-]+)/.exec(
						readFileSync(log).subarray(logFrom).toString("utf8"),
					);
					if (id) node.workerId = id[1];
					return Boolean(id);
				},
				{ timeoutMs: 60_000, intervalMs: 100, what: `engine ${node.name} /health and storage worker id` },
			);
		},
		/** Resolves true once a storage read through this node answers 200. */
		async ready() {
			const res = await fetch(`${endpoint}${READINESS_PROBE}`, {
				headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
				signal: AbortSignal.timeout(5_000),
			}).catch(() => null);
			return res?.status === 200;
		},
		stop: async () => proc?.stop("SIGTERM", 15_000),
		kill: async () => proc?.stop("SIGKILL"),
	};
	return node;
}

/**
 * Runs `rivet-engine storage ...` with `node`'s config and environment;
 * resolves to its JSON answer. The CLI starts a storage worker of its own
 * for the command, which binds an api-peer port: it gets free ports of its
 * own, not the node's (nor the default 6421, which another engine may hold).
 */
async function storageCli(node, args) {
	const ports = await findFreePorts();
	const env = {
		...node.env,
		RIVET__GUARD__PORT: String(ports.guard),
		RIVET__API_PEER__PORT: String(ports.apiPeer),
		RIVET__METRICS__PORT: String(ports.metrics),
		// Nor the node's log directory.
		RIVET__STORAGE__LOG_DIRECTORY: node.cliLogDir,
	};
	const { stdout } = await execFileP(enginePath("v3"), ["storage", ...args, "--config", node.configPath], {
		env,
		encoding: "utf8",
		timeout: 60_000,
		maxBuffer: 16 << 20,
	}).catch((err) => {
		throw new Error(
			`rivet-engine storage ${args.join(" ")} failed: ${err.message}\n${String(err.stdout ?? "").slice(-2000)}`,
		);
	});
	// The CLI logs its own start-up (`ts=... level=...` lines) on stdout before its answer.
	const start = stdout.search(/^[{[]/m);
	if (start < 0) throw new Error(`rivet-engine storage ${args.join(" ")} printed no JSON:\n${stdout.slice(-2000)}`);
	return JSON.parse(stdout.slice(start));
}

/**
 * Starts moto_server, the gate, and `nodes` engine 3.0 nodes (at once),
 * provisions the storage partition over all of them and waits until every
 * node answers a storage read. `env` goes to every node. Returns `{nodes,
 * endpoints, objectStore, dir, startedInMs, partition, holder, coordinator,
 * logTail, stop}`. Set `KEEP_ENGINE_DIR=1` to keep the directory.
 */
export async function startCluster3({ nodes: count = 3, env = {} } = {}) {
	if (!objectStoreAvailable()) {
		throw new Error(
			"the engine 3.0 cluster needs moto_server (PyPI moto[server]): run `npm install`, which installs it, or `pip install 'moto[server]'`",
		);
	}
	const began = Date.now();
	const dir = mkdtempSync(join(tmpdir(), `${TEMP_PREFIX}cluster3-`));
	const started = [];
	const stopAll = async () => {
		// Engines first (in parallel: each may take its stop budget), then the store.
		const [store, gate, ...nodes] = started;
		await Promise.all(nodes.map((n) => n.stop().catch(() => {})));
		await gate?.stop().catch(() => {});
		await store?.stop().catch(() => {});
		started.length = 0;
		if (!process.env.KEEP_ENGINE_DIR) rmSync(dir, { recursive: true, force: true });
	};
	try {
		const moto = await startMoto(dir);
		started.push(moto);
		const gate = await objectStoreGate(moto.port);
		started.push(gate);
		progress(`object store (moto_server) on port ${moto.port}, bucket "${BUCKET}", after ${Date.now() - began} ms`);
		const nodes = [];
		for (let i = 0; i < count; i++) nodes.push(await engineNode({ index: i, dir, store: gate, env }));
		started.push(...nodes);
		await Promise.all(nodes.map((n) => n.start()));
		progress(`${count} engine nodes answer /health after ${Date.now() - began} ms`);
		// The coordinator writes the (empty) partition manifest a moment after
		// the nodes start (until then the CLI answers "manifest unavailable").
		// `provision` then creates the partition and waits 5 s for its
		// placement to converge; on a busy machine that can take longer, and
		// it says "did not converge" with the partition created: the
		// partition is then waited on here. It is run again only while the
		// manifest still has no partition.
		await waitFor(
			async () => {
				const shown = await storageCli(nodes[0], ["partition", "show"]);
				if (shown.partitionManifestVersion == null) return false;
				if (shown.partitions.length > 0) return shown.partitions[0].maintainer;
				try {
					const placed = await storageCli(nodes[0], [
						"partition",
						"provision",
						"--partitions",
						"1",
						"--workers",
						...nodes.map((n) => n.workerId),
					]);
					progress(
						`storage partition provisioned over ${placed.placement?.workers ?? "?"} workers after ${Date.now() - began} ms`,
					);
				} catch (err) {
					progress(`provisioning: ${/Error: (.*)/.exec(err.message)?.[1] ?? err.message.slice(0, 200)}`);
				}
				return false;
			},
			{ timeoutMs: 90_000, intervalMs: 200, what: "the storage partition provisioned over every node" },
		);
		await waitFor(async () => (await Promise.all(nodes.map((n) => n.ready()))).every(Boolean), {
			timeoutMs: 60_000,
			intervalMs: 100,
			what: "every engine node answering a storage read",
		});
		const startedInMs = Date.now() - began;
		progress(`ready after ${startedInMs} ms (${dir})`);

		/** The partition (one: `--partitions 1`) as `storage partition show` gives it. */
		const anyRunning = () => nodes.find((n) => n.running) ?? nodes[0];
		const partition = async () => (await storageCli(anyRunning(), ["partition", "show"])).partitions[0];
		const byWorker = (id) => nodes.find((n) => n.workerId === id) ?? null;
		return {
			dir,
			nodes,
			endpoints: nodes.map((n) => n.endpoint),
			objectStore: gate,
			moto,
			startedInMs,
			partition,
			/** The node maintaining the storage partition (the engine's `maintainer`), or null. */
			holder: async () => byWorker((await partition())?.maintainer),
			/** The node holding the storage coordinator's tenure, or null. */
			coordinator: async () => byWorker((await storageCli(anyRunning(), ["coordinator", "show"])).holder),
			logTail: () => nodes.map((n) => `--- engine ${n.name} (${n.log}) ---\n${n.logTail()}`).join("\n"),
			stop: stopAll,
		};
	} catch (err) {
		await stopAll();
		throw err;
	}
}
