//! End-to-end check of the engine module against a real `rivet-engine`.
//!
//! Skipped (passes without doing anything) unless `RIVETKIT_TEST_ENGINE_BINARY`
//! points at a binary, e.g.
//! `RIVETKIT_TEST_ENGINE_BINARY=node_modules/@rivetkit/engine-cli-linux-x64-musl/rivet-engine cargo test --test engine_process`.
//! It uses private ports and a temporary storage root, so it never touches a
//! developer's own engine, and kills the engine's process group at the end.

use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rivetkit_native_core::engine::{ensure_engine, ensure_runner_config, http, probe_engine, EngineStatus};
use rivetkit_native_core::engine::{EngineArch, EngineOptions};

/// Kills the spawned engine's process group, even if an assertion fails.
struct KillGroup {
    pid: u32,
    endpoint: String,
}

impl Drop for KillGroup {
    fn drop(&mut self) {
        #[cfg(unix)]
        {
            let group = -(self.pid as i32);
            // SAFETY: plain kill(2) on the group we created with process_group(0).
            unsafe { libc::kill(group, libc::SIGTERM) };
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) && port_in_use(&self.endpoint) {
                std::thread::sleep(Duration::from_millis(100));
            }
            // SAFETY: as above; a no-op if the group is already gone.
            unsafe { libc::kill(group, libc::SIGKILL) };
        }
    }
}

fn port_in_use(endpoint: &str) -> bool {
    let addr = endpoint.trim_start_matches("http://");
    std::net::TcpStream::connect(addr).is_ok()
}

/// A port p with p, p+1 and p+10 free (guard, api-peer, metrics).
fn free_engine_port() -> u16 {
    let seed = (std::process::id() % 5000) as u16;
    (0..500u16)
        .map(|i| 27000 + (seed + i * 17) % 12000)
        .find(|&p| [p, p + 1, p + 10].iter().all(|&q| TcpListener::bind(("127.0.0.1", q)).is_ok()))
        .expect("a free port triple")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawns_reuses_and_configures_a_real_engine() {
    let Some(binary) = std::env::var_os("RIVETKIT_TEST_ENGINE_BINARY").map(PathBuf::from) else {
        eprintln!("skipped: set RIVETKIT_TEST_ENGINE_BINARY to run against a real engine");
        return;
    };
    let storage = std::env::temp_dir().join(format!("rivetkit-native-engine-it-{}", std::process::id()));
    std::fs::create_dir_all(&storage).expect("create storage dir");
    // The only test in this binary, so no other thread reads the environment.
    std::env::set_var("RIVETKIT_STORAGE_PATH", &storage);

    let port = free_engine_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let config = EngineOptions {
        endpoint: endpoint.clone(),
        engine_binary_path: Some(binary),
        pool_name: "it-pool".into(),
        engine_start_timeout: Duration::from_secs(60),
        ..EngineOptions::default()
    };

    let started = Instant::now();
    let status = ensure_engine(&config).await.expect("engine starts");
    let EngineStatus::Spawned(spawned) = status else {
        panic!("expected a spawned engine, got {status:?}");
    };
    let (pid, log_dir, arch) = (spawned.pid, spawned.log_dir.clone(), spawned.arch);
    let guard = KillGroup { pid, endpoint: endpoint.clone() };
    eprintln!("spawned {}", arch.label());
    eprintln!("engine pid {pid} healthy after {} ms", started.elapsed().as_millis());
    assert!(log_dir.starts_with(&storage));
    assert!(std::fs::read_dir(&log_dir).expect("log dir").count() >= 2);

    let health = probe_engine(&endpoint).await.expect("probe").expect("healthy engine");
    assert_eq!(health.runtime.as_deref(), Some("engine"));

    let reused = ensure_engine(&config).await.expect("reuse");
    assert!(matches!(reused, EngineStatus::Reused { arch: a } if a == arch), "{reused:?}");

    let started = Instant::now();
    ensure_runner_config(&config).await.expect("runner config");
    eprintln!("runner config in {} ms", started.elapsed().as_millis());

    // The config file made the datacenter advertise the real port.
    let token = config.token.as_deref();
    if arch == EngineArch::V2 {
        let url = format!("{endpoint}/datacenters?namespace=default").parse().expect("url");
        let dcs = http::get(&url, token, Duration::from_secs(5)).await.expect("datacenters");
        assert!(dcs.text().contains(&format!(":{port}/")), "{}", dcs.text());
    }

    // Creating an actor answers promptly (reported to hang 30 s without the config file).
    let url = format!("{endpoint}/actors?namespace=default").parse().expect("url");
    let body = br#"{"name":"it","key":"k","runner_name_selector":"it-pool","crash_policy":"sleep"}"#;
    let started = Instant::now();
    let res = http::request("POST", &url, token, Some(body), Duration::from_secs(10)).await.expect("create actor");
    assert_eq!(res.status, 200, "{}", res.text());
    assert!(started.elapsed() < Duration::from_secs(5));

    // The engine belongs to this host: stopping it ends the process.
    assert!(spawned.stop().await, "the engine exits when its host stops it");
    assert!(!spawned.is_running());
    assert!(probe_engine(&endpoint).await.expect("probe").is_none(), "engine still up");
    drop(guard);
    let _ = std::fs::remove_dir_all(&storage);
}
