// Host CPU per action in every shape of work, side by side: the same RivetKit
// app (bench/apps/rivetkit-app.mjs) on the reference @rivetkit/rivetkit-napi
// ("theirs") and on rivetkit-native ("ours"), for one RivetKit version (a
// stack of bench/lib/stacks.mjs, on an engine of its version), both hosts up
// on one engine, each on a pool of its own. For every cell of
//
//   client encoding  json, cbor, bare
//   actor shape      counter (one number), ledger (one entry more per
//                    action, broadcast to every connection; filled with
//                    `ledgerFill` entries first)
//   transport        HTTP (a `getForId` handle), WebSocket (`connect()`,
//                    subscribed to the ledger's broadcast)
//
// sequential actions are measured in `rounds` chunks taken by the two hosts
// in turns (the side going first alternates), and the host's own CPU time
// per action (`process.cpuUsage()` over IPC) is reported with the ratio
// ours / theirs. A fresh actor per side and cell, so that no cell inherits
// another's state. Then ours alone: the ledger's CPU per action over the
// counter's in the same encoding and transport ("growth").
//
// Beside each figure: the CPU of the host's JavaScript thread per action
// (/proc/<pid>/task/<pid>/schedstat). RivetKit's own JavaScript runs there
// and is the same on both addons, so the smaller of the two is an upper
// bound of that floor (it also holds each addon's work on that thread and
// V8's).
//
// Knobs (environment): BENCH_MATRIX_ENCODINGS=json,cbor,bare,
// BENCH_MATRIX_HTTP=90, BENCH_MATRIX_WS=150 (actions per cell and side),
// BENCH_MATRIX_FILL=1000 (ledger entries before the measure),
// BENCH_ROUNDS=3, BENCH_ADDON (ours: the index.js of another build),
// BENCH_RIVETKIT (run on its own: the first version it names; default 3).
// About 2 minutes per version on 2 cores.

import { fileURLToPath } from "node:url";

import { newClient, STACK_2_3 } from "./compare.mjs";
import { startBenchEngine } from "./lib/engine.mjs";
import { spawnSideHost } from "./lib/host.mjs";
import { int } from "./lib/knobs.mjs";
import { measure, merge } from "./lib/measure.mjs";
import { loadStack, stackKeys } from "./lib/stacks.mjs";
import { fmt, table } from "./lib/stats.mjs";

export const matrixOptions = () => ({
	encodings: (process.env.BENCH_MATRIX_ENCODINGS ?? "json,cbor,bare").split(","),
	http: int("BENCH_MATRIX_HTTP", 90),
	ws: int("BENCH_MATRIX_WS", 150),
	ledgerFill: int("BENCH_MATRIX_FILL", 1000),
	rounds: int("BENCH_ROUNDS", 3),
});

const SHAPES = [
	{ shape: "counter", handle: (client) => client.counter, op: (h) => h.increment(1) },
	{ shape: "ledger", handle: (client) => client.ledger, op: (h) => h.append("an entry") },
];
const TRANSPORTS = ["http", "ws"];

/** A fresh actor of `shape` on `side`, ready: an id handle and a connection. */
async function prepare({ side, shape, encoding, options }) {
	const key = `${shape.shape}-${encoding}-${side.spec.side}-${process.pid}`;
	const created = shape.handle(side.clients[encoding]).getOrCreate([key]);
	if (shape.shape === "ledger") await created.fill(options.ledgerFill);
	else await created.increment(1);
	const byId = shape.handle(side.clients[encoding]).getForId(await created.resolve());
	const conn = created.connect();
	// Subscribed, so that the ledger's broadcast is delivered.
	if (shape.shape === "ledger") conn.on("appended", () => {});
	// Warm both paths.
	for (let i = 0; i < 5; i++) await shape.op(byId);
	for (let i = 0; i < 5; i++) await shape.op(conn);
	return { byId, conn };
}

/** Runs the matrix of `stack` (default RivetKit 2.3.19) against `engine`; returns `{cells, notes}`. */
export async function runMatrix({ engine, stack = STACK_2_3, options = matrixOptions(), log = console.log }) {
	const notes = [];
	const sides = [];
	try {
		for (const spec of stack.sides) {
			const pool = `matrix-${spec.side}-${process.pid}`;
			const host = await spawnSideHost({ engine, stack, spec, pool });
			sides.push({ spec, host, clients: {} });
			await host.ready;
			for (const encoding of options.encodings)
				sides.at(-1).clients[encoding] = newClient(engine, pool, encoding, stack);
		}
		const cells = [];
		for (const encoding of options.encodings) {
			for (const shape of SHAPES) {
				const actors = [];
				for (const side of sides) actors.push(await prepare({ side, shape, encoding, options }));
				for (const transport of TRANSPORTS) {
					const total = transport === "http" ? options.http : options.ws;
					const rows = sides.map(() => []);
					for (let r = 0; r < options.rounds; r++) {
						const order = r % 2 === 0 ? [0, 1] : [1, 0];
						for (const s of order) {
							const target = transport === "http" ? actors[s].byId : actors[s].conn;
							const n = Math.floor(total / options.rounds) + (r < total % options.rounds ? 1 : 0);
							const load = { total: n, inFlight: 1, deadlineMs: 60_000 };
							rows[s].push(await measure({ host: sides[s].host, enginePid: engine.pid, load }, () => shape.op(target)));
						}
					}
					const merged = rows.map((r) => merge(r));
					const cell = { encoding, shape: shape.shape, transport };
					sides.forEach((side, s) => {
						cell[side.spec.side] = merged[s];
						if (merged[s].errors)
							notes.push(
								`${side.spec.label} ${encoding}/${shape.shape}/${transport}: ${merged[s].errors} errors (${merged[s].firstError})`,
							);
					});
					cells.push(cell);
					log(
						`matrix ${encoding} ${shape.shape} ${transport}: host CPU ms per action ` +
							sides.map((side, s) => `${side.spec.side} ${fmt(merged[s].hostCpuMsPerOp, 3)}`).join(", "),
					);
				}
				for (const a of actors) await a.conn.dispose();
			}
		}
		return { cells, notes };
	} finally {
		for (const side of sides) {
			await side.host.kill();
			for (const client of Object.values(side.clients)) await client.dispose();
		}
	}
}

/** The matrix as text: one table per transport, a column per encoding. */
export function reportMatrix({ cells, notes }, options = matrixOptions()) {
	const out = [];
	const cpu = (cell, side) => cell?.[side]?.hostCpuMsPerOp;
	const find = (encoding, shape, transport) =>
		cells.find((c) => c.encoding === encoding && c.shape === shape && c.transport === transport);
	for (const transport of TRANSPORTS) {
		const first = `${transport === "http" ? "HTTP" : "WebSocket"}, ms per action`;
		const rows = [];
		for (const { shape } of SHAPES) {
			const total = { [first]: `${shape}: host CPU, theirs / ours = ratio` };
			const js = { [first]: `${shape}: of it the JS thread, theirs / ours` };
			for (const encoding of options.encodings) {
				const cell = find(encoding, shape, transport);
				const [theirs, ours] = [cpu(cell, "theirs"), cpu(cell, "ours")];
				total[encoding] = `${fmt(theirs, 3)} / ${fmt(ours, 3)} = ${fmt(ours / theirs, 2)}`;
				js[encoding] = `${fmt(cell?.theirs?.jsThreadCpuMsPerOp, 3)} / ${fmt(cell?.ours?.jsThreadCpuMsPerOp, 3)}`;
			}
			rows.push(total, js);
		}
		const growth = { [first]: "ours: ledger / counter host CPU" };
		for (const encoding of options.encodings) {
			growth[encoding] = fmt(
				cpu(find(encoding, "ledger", transport), "ours") / cpu(find(encoding, "counter", transport), "ours"),
				2,
			);
		}
		rows.push(growth);
		out.push(table([first, ...options.encodings], rows));
	}
	out.push(
		`(ledger filled with ${options.ledgerFill} entries first; sequential actions, ${options.rounds} chunks per side in turns)`,
	);
	for (const note of notes) out.push(`note: ${note}`);
	return out.join("\n\n");
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
	const stack = await loadStack(stackKeys()[0]);
	const engine = await startBenchEngine({ arch: stack.engineArch });
	try {
		const options = matrixOptions();
		console.log(stack.title);
		console.log(reportMatrix(await runMatrix({ engine, stack, options }), options));
	} finally {
		await engine.stop();
	}
}
