// Test harness: a real Rivet Engine cluster on loopback. PostgreSQL and NATS
// (Debian's packages, installed by `npm install`, scripts/dev-setup.mjs) on
// private ports with their data in one temporary directory, and engine
// nodes of one datacenter sharing that database (docs/deploy.md, "What a
// cluster is"; docs/testing.md, "The engine cluster").
//
//   const cluster = await startCluster({ nodes: 2 });
//   try {
//     await upsertRunnerConfig(cluster.nodes[0].endpoint, "pool");
//     await cluster.nodes[1].kill();          // SIGKILL one node
//     await cluster.nodes[1].start();         // and bring it back, same ports
//     await cluster.nats.stop(); await cluster.nats.start();
//   } finally {
//     await cluster.stop();                   // every process it started, by pid
//   }
//
// The first node is started alone and waited on until a write succeeds:
// two nodes started at once on an empty database race on schema creation.
//
// This cluster is engine 2.3.19's (arch "v2" of ./engine.mjs): engine 3.0
// has no PostgreSQL or NATS (its nodes share one object store instead,
// docs/engine.md), so these nodes stay on v2.

import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { ADMIN_TOKEN, enginePath, engineEnv, findFreePorts, waitFor } from "./engine.mjs";
import { logTail, ownProcess } from "./processes.mjs";

/** Where Debian keeps PostgreSQL's server programs (not on PATH). */
function postgresBin(program) {
	const base = "/usr/lib/postgresql";
	if (existsSync(base)) {
		const versions = spawnSync("ls", [base], { encoding: "utf8" })
			.stdout.split("\n")
			.filter(Boolean)
			.sort((a, b) => b - a);
		for (const v of versions) {
			const path = join(base, v, "bin", program);
			if (existsSync(path)) return path;
		}
	}
	return program;
}

/** Whether the cluster's programs are on this machine (see dev-setup.mjs). */
export function clusterAvailable() {
	const missing = [];
	if (!existsSync(postgresBin("initdb")) && spawnSync("which", ["initdb"]).status !== 0) missing.push("postgresql");
	if (spawnSync("which", ["nats-server"]).status !== 0) missing.push("nats-server");
	return missing;
}

/**
 * PostgreSQL refuses to run as root: as root its processes run as the
 * `postgres` user (the Debian package makes it) in a directory it owns.
 */
function postgresUser() {
	if (process.getuid?.() !== 0) return {};
	const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
	const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
	return { uid, gid };
}

async function freePort() {
	return (await findFreePorts()).guard;
}

async function startPostgres(dir) {
	const data = join(dir, "pg");
	const user = postgresUser();
	mkdirSync(data, { recursive: true });
	chmodSync(dir, 0o755);
	if (user.uid !== undefined) chownSync(data, user.uid, user.gid);
	const log = join(dir, "postgres.log");
	const init = spawnSync(
		postgresBin("initdb"),
		["-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"],
		{
			encoding: "utf8",
			...user,
		},
	);
	if (init.status !== 0) throw new Error(`initdb failed: ${init.stderr || init.stdout}`);
	const port = await freePort();
	const args = ["-D", data, "-p", String(port), "-k", data, "-c", "listen_addresses=127.0.0.1"];
	// A test database: durability is not what is tested here.
	for (const setting of ["fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=400"])
		args.push("-c", setting);
	const proc = ownProcess(postgresBin("postgres"), args, { env: process.env, log, user });
	const psql = (sql, db = "postgres") =>
		spawnSync("psql", ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres", "-d", db, "-qAtc", sql], {
			encoding: "utf8",
		});
	await waitFor(
		() => {
			if (proc.exited) throw new Error(`postgres exited during start-up\n${logTail(log)}`);
			return psql("select 1").status === 0;
		},
		{ timeoutMs: 30_000, intervalMs: 50, what: "PostgreSQL accepting connections" },
	);
	const created = psql("create database rivet");
	if (created.status !== 0) throw new Error(`create database failed: ${created.stderr}`);
	return {
		port,
		url: `postgresql://postgres@127.0.0.1:${port}/rivet?sslmode=disable`,
		/** Runs `sql` on the engine's database; resolves to psql's output. */
		query: (sql) => {
			const res = psql(sql, "rivet");
			if (res.status !== 0) throw new Error(`psql: ${res.stderr}`);
			return res.stdout.trim();
		},
		pid: proc.pid,
		log,
		// SIGINT is PostgreSQL's fast shutdown.
		stop: () => proc.stop("SIGINT"),
	};
}

async function startNats(dir) {
	const port = await freePort();
	const log = join(dir, "nats.log");
	let proc = null;
	const nats = {
		port,
		log,
		get pid() {
			return proc?.pid;
		},
		get running() {
			return Boolean(proc && !proc.exited);
		},
		/** Starts it (again) on the same port. */
		async start() {
			proc = ownProcess("nats-server", ["-a", "127.0.0.1", "-p", String(port)], { env: process.env, log });
			await waitFor(
				() => {
					if (proc.exited) throw new Error(`nats-server exited during start-up\n${logTail(log)}`);
					return readFileSync(log, "utf8").split("Server is ready").length > nats.starts + 1;
				},
				{ timeoutMs: 15_000, intervalMs: 25, what: "NATS ready" },
			);
			nats.starts += 1;
		},
		starts: 0,
		async stop() {
			await proc?.stop("SIGTERM");
		},
	};
	await nats.start();
	return nats;
}

/**
 * One engine node: its own guard, api-peer and metrics ports, the shared
 * database and NATS. `start()` (again, same ports), `stop()` (SIGTERM: a
 * leader hands its lease over) and `kill()` (SIGKILL).
 */
async function engineNode({ index, dir, pg, nats, env }) {
	const host = "127.0.0.1";
	const ports = await findFreePorts();
	const nodeDir = join(dir, `node-${index + 1}`);
	mkdirSync(nodeDir, { recursive: true });
	const configPath = join(nodeDir, "engine.json");
	const config = {
		telemetry: { enabled: false },
		postgres: { url: pg.url },
		// NATS must be in the file: RIVET__NATS__ADDRESSES is ignored.
		nats: { addresses: [`127.0.0.1:${nats.port}`] },
		topology: {
			datacenter_label: 1,
			datacenters: {
				default: {
					datacenter_label: 1,
					is_leader: true,
					public_url: `http://${host}:${ports.guard}/`,
					peer_url: `http://${host}:${ports.apiPeer}/`,
				},
			},
		},
	};
	writeFileSync(configPath, JSON.stringify(config, null, 2));
	const nodeEnv = { ...process.env, ...engineEnv({ arch: "v2", host, ...ports }), ...env };
	delete nodeEnv.RIVET__FILE_SYSTEM__PATH;
	const log = join(nodeDir, "engine.log");
	let proc = null;
	const endpoint = `http://${host}:${ports.guard}`;
	const node = {
		index,
		endpoint,
		ports,
		log,
		get pid() {
			return proc?.pid;
		},
		get running() {
			return Boolean(proc && !proc.exited);
		},
		logTail: () => logTail(log),
		/** Starts the node (if it is not running) and waits until it accepts a write. */
		async start() {
			if (proc && !proc.exited) return;
			proc = ownProcess(enginePath("v2"), ["start", "--config", configPath], { env: nodeEnv, log });
			const probe = `${endpoint}/runner-configs/rivetkit-native-cluster-probe?namespace=default`;
			await waitFor(
				async () => {
					if (proc.exited) throw new Error(`engine node ${index + 1} exited during start-up\n${logTail(log)}`);
					const res = await fetch(probe, {
						method: "PUT",
						headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
						body: JSON.stringify({ datacenters: { default: { normal: {} } } }),
						signal: AbortSignal.timeout(2_000),
					}).catch(() => null);
					return res?.ok;
				},
				{ timeoutMs: 60_000, intervalMs: 100, what: `engine node ${index + 1} accepting writes` },
			);
		},
		stop: async () => proc?.stop("SIGTERM"),
		kill: async () => proc?.stop("SIGKILL"),
	};
	return node;
}

/**
 * Starts PostgreSQL, NATS and `nodes` engine nodes (one after another).
 * `env` goes to every node (give them all the same pegboard thresholds).
 * Returns `{nodes, endpoints, pg, nats, dir, leader, logTail, stop}`. Set
 * `KEEP_ENGINE_DIR=1` to keep the directory (databases and logs).
 */
export async function startCluster({ nodes: count = 2, env = {} } = {}) {
	const missing = clusterAvailable();
	if (missing.length) {
		throw new Error(
			`the engine cluster needs ${missing.join(" and ")} (Debian packages): run \`npm install\`, which installs them as root, or \`apt-get install ${missing.join(" ")}\``,
		);
	}
	const dir = mkdtempSync(join(tmpdir(), "rivetkit-native-cluster-"));
	const started = [];
	const stopAll = async () => {
		for (const part of started.reverse()) await part.stop().catch(() => {});
		if (!process.env.KEEP_ENGINE_DIR) rmSync(dir, { recursive: true, force: true });
	};
	try {
		const pg = await startPostgres(dir);
		started.push(pg);
		const nats = await startNats(dir);
		started.push(nats);
		const nodes = [];
		for (let i = 0; i < count; i++) {
			const node = await engineNode({ index: i, dir, pg, nats, env });
			await node.start();
			nodes.push(node);
			started.push(node);
		}
		/**
		 * The node holding the leader lease (the `udb_lease` row names its
		 * node id, which the node logs when it takes the lease).
		 */
		const leader = () => {
			const holder = pg.query("select * from udb_lease").split("\n")[0]?.split("|")[2];
			return nodes.find((n) => holder && n.running && readFileSync(n.log, "utf8").includes(holder)) ?? null;
		};
		const tails = () => nodes.map((n) => `--- engine node ${n.index + 1} (${n.log}) ---\n${n.logTail()}`).join("\n");
		return { dir, pg, nats, nodes, endpoints: nodes.map((n) => n.endpoint), leader, logTail: tails, stop: stopAll };
	} catch (err) {
		await stopAll();
		throw err;
	}
}
