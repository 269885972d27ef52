//! Free loopback ports for test servers.
//!
//! The ports are taken below the kernel's ephemeral range (`ip_local_port_range`), where it
//! never hands out the local port of an outgoing connection: a server started again on its
//! ports after minutes of traffic (the chaos run restarts the object store) finds them still
//! free unless another server took them.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};

/// The lowest port handed out.
const LOWEST: u16 = 10_000;

/// Asks for `n` distinct free loopback ports. The listeners are closed before returning, so a
/// port can in principle be taken by another server before this one binds it; the servers
/// started here fail loudly, or start again on other ports, if that happens.
pub fn free_ports(n: usize) -> Vec<u16> {
    let highest = ephemeral_low().saturating_sub(1);
    if highest < LOWEST + 2_000 {
        return from_the_kernel(n);
    }
    let span = u64::from(highest - LOWEST);
    let mut held: Vec<TcpListener> = Vec::with_capacity(n);
    let mut tries = 0;
    while held.len() < n {
        tries += 1;
        if tries > 100 * n {
            return from_the_kernel(n);
        }
        let port = LOWEST + (next() % span) as u16;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
        }
    }
    held.iter()
        .filter_map(|l| l.local_addr().ok().map(|a| a.port()))
        .collect()
}

/// Ports the kernel picks (in its ephemeral range).
fn from_the_kernel(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a loopback port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local address").port())
        .collect()
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A pseudo-random sequence that differs between processes (splitmix64 over a counter
/// seeded by the process id and the clock).
fn next() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let _ = STATE.compare_exchange(0, seed(), Ordering::SeqCst, Ordering::SeqCst);
    let mut z = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::SeqCst);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    ((u64::from(std::process::id()) << 32) ^ nanos) | 1
}

#[cfg(test)]
mod tests {
    use super::{ephemeral_low, free_ports};
    use std::collections::HashSet;

    #[test]
    fn ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ports = free_ports(16);
        assert_eq!(ports.iter().collect::<HashSet<_>>().len(), 16, "{ports:?}");
        let low = ephemeral_low();
        for p in &ports {
            assert!(*p < low, "{p} is in the ephemeral range from {low}");
            std::net::TcpListener::bind(("127.0.0.1", *p)).expect("still free");
        }
    }
}
