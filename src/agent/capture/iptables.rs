//! The iptables fallback of [`super`]: Istio's own chains, fed to `iptables-restore
//! --noflush`, and their removal.

use std::process::Command;

use super::Plan;

impl Plan {
    /// The `iptables-restore --noflush` input for one family: Istio's chains, created (or
    /// flushed) and filled, and the jumps to them.
    pub(super) fn iptables(&self, v6: bool) -> String {
        let (localhost, passthrough) = if v6 {
            ("::1/128", None)
        } else {
            ("127.0.0.1/32", Some("127.0.0.6/32"))
        };
        let mut r = String::from("*nat\n");
        for chain in [
            "ISTIO_INBOUND",
            "ISTIO_IN_REDIRECT",
            "ISTIO_OUTPUT",
            "ISTIO_REDIRECT",
        ] {
            r.push_str(&format!(":{chain} - [0:0]\n"));
        }
        r.push_str(&format!(
            "-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports {}\n",
            self.inbound_port
        ));
        r.push_str(&format!(
            "-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports {}\n",
            self.envoy_port
        ));
        for p in &self.exclude_inbound {
            r.push_str(&format!("-A ISTIO_INBOUND -p tcp --dport {p} -j RETURN\n"));
        }
        match &self.inbound_ports {
            None => r.push_str(&format!(
                "-A ISTIO_INBOUND -p tcp ! --dport {} -j ISTIO_IN_REDIRECT\n",
                self.inbound_port
            )),
            Some(ports) => {
                for p in ports {
                    r.push_str(&format!(
                        "-A ISTIO_INBOUND -p tcp --dport {p} -j ISTIO_IN_REDIRECT\n"
                    ));
                }
            }
        }
        for p in &self.exclude_outbound {
            r.push_str(&format!("-A ISTIO_OUTPUT -p tcp --dport {p} -j RETURN\n"));
        }
        if let Some(source) = passthrough {
            r.push_str(&format!("-A ISTIO_OUTPUT -o lo -s {source} -j RETURN\n"));
        }
        for (flag, list) in [("--uid-owner", &self.uids), ("--gid-owner", &self.gids)] {
            for id in list.iter() {
                r.push_str(&format!(
                    "-A ISTIO_OUTPUT -o lo ! -d {localhost} -m owner {flag} {id} -j ISTIO_IN_REDIRECT\n"
                ));
                r.push_str(&format!(
                    "-A ISTIO_OUTPUT -o lo -m owner ! {flag} {id} -j RETURN\n"
                ));
                r.push_str(&format!("-A ISTIO_OUTPUT -m owner {flag} {id} -j RETURN\n"));
            }
        }
        r.push_str(&format!("-A ISTIO_OUTPUT -d {localhost} -j RETURN\n"));
        let (exclude, include) = if v6 {
            (&self.exclude_v6, &self.include_v6)
        } else {
            (&self.exclude_v4, &self.include_v4)
        };
        for c in exclude {
            r.push_str(&format!("-A ISTIO_OUTPUT -d {c} -j RETURN\n"));
        }
        match include {
            None => r.push_str("-A ISTIO_OUTPUT -j ISTIO_REDIRECT\n"),
            Some(list) => {
                for c in list {
                    r.push_str(&format!("-A ISTIO_OUTPUT -d {c} -j ISTIO_REDIRECT\n"));
                }
            }
        }
        r.push_str(
            "-A PREROUTING -p tcp -j ISTIO_INBOUND\n-A OUTPUT -p tcp -j ISTIO_OUTPUT\nCOMMIT\n",
        );
        r
    }
}

/// The `iptables-restore --noflush` input that removes Istio's chains and the jumps to them.
pub(super) fn iptables_cleanup(program: &str) -> String {
    // Only what capture added: the jumps, then the chains, each if it is there.
    let save = Command::new(program.replace("-restore", "-save"))
        .args(["-t", "nat"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut r = String::from("*nat\n");
    for line in save.lines() {
        if line == "-A PREROUTING -p tcp -j ISTIO_INBOUND"
            || line == "-A OUTPUT -p tcp -j ISTIO_OUTPUT"
        {
            r.push_str(&line.replacen("-A", "-D", 1));
            r.push('\n');
        }
    }
    for chain in [
        "ISTIO_INBOUND",
        "ISTIO_IN_REDIRECT",
        "ISTIO_OUTPUT",
        "ISTIO_REDIRECT",
    ] {
        if save.lines().any(|l| l.starts_with(&format!(":{chain} "))) {
            r.push_str(&format!("-F {chain}\n-X {chain}\n"));
        }
    }
    r.push_str("COMMIT\n");
    r
}
