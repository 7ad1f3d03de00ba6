// `npm start`: serves the registry's actors.
//
// `registry.start()` connects to the Rivet Engine at RIVET_ENDPOINT
// (default http://127.0.0.1:6420). On a local endpoint the native runtime
// starts an engine if none is running there, and leaves it running for the
// next start. RivetKit installs the Ctrl-C/SIGTERM handlers itself: they
// put every actor to sleep (saving its state), then end the process.

import { registry } from "./registry.mjs";

registry.start();
