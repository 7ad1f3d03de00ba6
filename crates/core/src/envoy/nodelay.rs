//! Latency tuning of the envoy's connection to the engine: Nagle off on
//! our side, quick ACKs for the engine's side.
//!
//! `rivet-envoy-client` opens its WebSocket with Nagle left on. Every
//! gateway request and WebSocket message travels over that one connection,
//! and the envoy often writes an ack and a reply as two small frames: with
//! Nagle on, the second waits for the engine's delayed ACK (about 40 ms).
//! The crate offers no socket option, so once it reports a connection we
//! find our TCP sockets to the engine's address and set `TCP_NODELAY` on
//! them. Linux only (it reads `/proc`); elsewhere this does nothing.

use std::net::SocketAddr;

/// Sets `TCP_NODELAY` on this process's TCP sockets connected to `endpoint`
/// (`http://host:port`). Returns how many sockets were changed.
pub fn set_nodelay_to(endpoint: &str) -> usize {
    match resolve(endpoint) {
        Some(peers) => imp::set_option(&peers, libc_opt::NODELAY),
        None => 0,
    }
}

/// The engine also writes small frames with Nagle on (a request's start
/// and its body), so its second frame waits for our ACK, which the kernel
/// delays by up to 40 ms while we have nothing to send. `TCP_QUICKACK`
/// makes the kernel ACK at once, but Linux leaves quick-ack mode again by
/// itself, so it must be re-applied: this keeps doing so every few
/// milliseconds (one `readlink` and one `setsockopt`) until `stop` fires or
/// the connection closes. Returns at once where unsupported.
pub async fn keep_quickack(endpoint: String, stop: impl Fn() -> bool) {
    const PERIOD: std::time::Duration = std::time::Duration::from_millis(5);
    let Some(peers) = resolve(&endpoint) else { return };
    let sockets = imp::sockets_to(&peers);
    if sockets.is_empty() {
        return;
    }
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        if stop() || !sockets.iter().any(|s| imp::quickack(*s)) {
            return;
        }
    }
}

mod libc_opt {
    #[cfg(target_os = "linux")]
    pub const NODELAY: i32 = libc::TCP_NODELAY;
    #[cfg(not(target_os = "linux"))]
    pub const NODELAY: i32 = 0;
}

fn resolve(endpoint: &str) -> Option<Vec<SocketAddr>> {
    use std::net::ToSocketAddrs;
    let url = url::Url::parse(endpoint).ok()?;
    let host = url.host_str()?.trim_start_matches('[').trim_end_matches(']').to_string();
    let port = url.port_or_known_default()?;
    (host.as_str(), port).to_socket_addrs().ok().map(|a| a.collect())
}

#[cfg(target_os = "linux")]
mod imp {
    use std::collections::HashSet;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

    pub fn set_option(peers: &[SocketAddr], option: i32) -> usize {
        let inodes = socket_inodes_to(peers);
        if inodes.is_empty() {
            return 0;
        }
        let Ok(fds) = std::fs::read_dir("/proc/self/fd") else { return 0 };
        let mut changed = 0;
        for entry in fds.flatten() {
            let Ok(target) = std::fs::read_link(entry.path()) else { continue };
            let Some(inode) = target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|t| t.parse::<u64>().ok())
            else {
                continue;
            };
            if !inodes.contains(&inode) {
                continue;
            }
            let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
            // The fd stays owned by the envoy; we only flip one option on it.
            let one: libc::c_int = 1;
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    libc::IPPROTO_TCP,
                    option,
                    &one as *const _ as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                changed += 1;
            }
        }
        changed
    }

    /// `(fd, inode)` of this process's sockets connected to `peers`.
    pub fn sockets_to(peers: &[SocketAddr]) -> Vec<(i32, u64)> {
        let inodes = socket_inodes_to(peers);
        let Ok(fds) = std::fs::read_dir("/proc/self/fd") else { return Vec::new() };
        fds.flatten()
            .filter_map(|entry| {
                let inode = socket_inode(&entry.path())?;
                let fd = entry.file_name().to_str()?.parse().ok()?;
                inodes.contains(&inode).then_some((fd, inode))
            })
            .collect()
    }

    fn socket_inode(path: &std::path::Path) -> Option<u64> {
        std::fs::read_link(path)
            .ok()?
            .to_str()?
            .strip_prefix("socket:[")?
            .strip_suffix(']')?
            .parse()
            .ok()
    }

    /// Sets `TCP_QUICKACK` if `fd` still is the same socket; false once it is gone.
    pub fn quickack((fd, inode): (i32, u64)) -> bool {
        if socket_inode(std::path::Path::new(&format!("/proc/self/fd/{fd}"))) != Some(inode) {
            return false;
        }
        let one: libc::c_int = 1;
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_QUICKACK,
                &one as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        rc == 0
    }

    /// Inodes of established TCP sockets whose remote end is one of `peers`.
    fn socket_inodes_to(peers: &[SocketAddr]) -> HashSet<u64> {
        let mut out = HashSet::new();
        for (file, v6) in [("/proc/self/net/tcp", false), ("/proc/self/net/tcp6", true)] {
            let Ok(table) = std::fs::read_to_string(file) else { continue };
            for line in table.lines().skip(1) {
                let cols: Vec<&str> = line.split_whitespace().collect();
                // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
                if cols.len() < 10 || cols[3] != "01" {
                    continue;
                }
                let Some(remote) = parse_addr(cols[2], v6) else { continue };
                if peers.iter().any(|p| same_peer(p, &remote)) {
                    if let Ok(inode) = cols[9].parse() {
                        out.insert(inode);
                    }
                }
            }
        }
        out
    }

    fn same_peer(a: &SocketAddr, b: &SocketAddr) -> bool {
        let canon = |ip: IpAddr| match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(v6)),
            v4 => v4,
        };
        a.port() == b.port() && canon(a.ip()) == canon(b.ip())
    }

    /// `0100007F:1914` (v4) or 32 hex digits + port (v6), as the kernel prints them.
    fn parse_addr(text: &str, v6: bool) -> Option<SocketAddr> {
        let (ip, port) = text.split_once(':')?;
        let port = u16::from_str_radix(port, 16).ok()?;
        let ip = if v6 {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_mut(4).enumerate() {
                let word = u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok()?;
                chunk.copy_from_slice(&word.to_ne_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        } else {
            IpAddr::V4(Ipv4Addr::from(u32::from_str_radix(ip, 16).ok()?.to_ne_bytes()))
        };
        Some(SocketAddr::new(ip, port))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn parses_kernel_addresses() {
            assert_eq!(parse_addr("0100007F:1914", false), Some("127.0.0.1:6420".parse().unwrap()));
            assert_eq!(
                parse_addr("00000000000000000000000001000000:1914", true),
                Some("[::1]:6420".parse().unwrap())
            );
        }

        #[test]
        fn sets_nodelay_on_a_real_connection() {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let stream = std::net::TcpStream::connect(addr).unwrap();
            assert!(!stream.nodelay().unwrap());
            assert!(set_option(&[addr], libc::TCP_NODELAY) >= 1);
            assert!(stream.nodelay().unwrap());
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub fn set_option(_peers: &[std::net::SocketAddr], _option: i32) -> usize {
        0
    }
    pub fn sockets_to(_peers: &[std::net::SocketAddr]) -> Vec<(i32, u64)> {
        Vec::new()
    }
    pub fn quickack(_socket: (i32, u64)) -> bool {
        false
    }
}
