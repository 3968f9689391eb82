//! Which `Host` a loopback listener with open reads answers: the agent's control API and the
//! daemon's API refuse a request that names another host, which is how a web page reads a
//! loopback service through a name of its own that resolves to 127.0.0.1 (DNS rebinding).

/// Whether a `Host` value names this machine's loopback: `localhost` (or a name under it) or a
/// loopback address, with any port.
pub fn names_loopback(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_names_and_others() {
        for host in [
            "localhost",
            "LOCALHOST.:7070",
            "app.localhost:80",
            "127.0.0.1",
            "127.1.2.3:9",
            "[::1]",
            "[::1]:7070",
        ] {
            assert!(super::names_loopback(host), "{host}");
        }
        for host in [
            "attacker.example",
            "127.0.0.1.attacker.example:7070",
            "localhost.attacker.example",
            "10.0.0.1:7070",
            "[::2]:80",
            "",
        ] {
            assert!(!super::names_loopback(host), "{host}");
        }
    }
}
