//! Free loopback ports for test servers.

use std::net::TcpListener;

/// Asks the kernel for `n` distinct free loopback ports. The listeners are closed before
/// returning, so a port can in principle be taken by someone else before the server binds it;
/// the servers started here fail loudly if that happens.
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a loopback port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local address").port())
        .collect()
}
