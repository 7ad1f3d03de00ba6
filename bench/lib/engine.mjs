// The engine for benchmarks: the test harness's private engine (free ports,
// temporary database), plus the gateway helpers the scenarios use.

export {
	getOrCreateActor,
	gatewayFetch,
	startEngine,
	upsertRunnerConfig,
} from "../../__test__/helpers/engine.mjs";
