//! `wayfinder agent capture`: traffic capture for the sidecar, as Istio's `istio-iptables`
//! (istio-init, and the VM start script) sets it up, in REDIRECT mode.
//!
//! Inbound TCP to the workload goes to Envoy's inbound capture port (`-z`, 15006) and
//! outbound TCP to Envoy's outbound port (`-p`, 15001), except:
//! - inbound: ports excluded with `-d`, and the proxy's own (15020, 15021, 15090); only ports
//!   in `-b` when it is not `*`;
//! - outbound: ports excluded with `-o`; addresses excluded with `-x`, and only those in `-i`
//!   when it is not `*`; traffic to `127.0.0.1`/`::1`; and the proxy's own connections (its
//!   uid `-u` and gid `-g`), so that Envoy's connections to the services are not captured
//!   again. Traffic over loopback from another user is left alone, as Istio leaves it, but for
//!   a connection the proxy makes to the workload's own address, which goes to the inbound
//!   capture port.
//!
//! With nftables (`nft` on `PATH`), everything goes in wayfinder's own table, `inet
//! wayfinder`, written in one transaction (replaced whole when capture runs again), and
//! `--cleanup` deletes that table, which is exactly what capture added. Where `nft` is missing,
//! `iptables-restore` (and `ip6tables-restore`) install Istio's own chains (`ISTIO_INBOUND`,
//! `ISTIO_IN_REDIRECT`, `ISTIO_OUTPUT`, `ISTIO_REDIRECT`) in the `nat` table with the jumps to
//! them, and `--cleanup` removes those chains and jumps. `--dry-run` prints what would be
//! applied. It needs `CAP_NET_ADMIN` in the network namespace it changes.

use std::io::Write;
use std::process::{Command, Stdio};

use clap::Args;

mod iptables;

use iptables::iptables_cleanup;

/// The table capture owns (nftables).
pub const TABLE: &str = "wayfinder";

/// Ports of the proxy itself, never captured inbound: the agent's status port, Envoy's
/// health and Prometheus ports.
const PROXY_PORTS: [u16; 3] = [15020, 15021, 15090];

/// `wayfinder agent capture` flags: istio-iptables' names.
#[derive(Clone, Debug, Args)]
pub struct CaptureArgs {
    /// Envoy's outbound capture port.
    #[arg(short = 'p', long = "envoy-port", default_value_t = 15001)]
    pub envoy_port: u16,
    /// Envoy's inbound capture port.
    #[arg(short = 'z', long = "inbound-capture-port", default_value_t = 15006)]
    pub inbound_port: u16,
    /// The proxy's uids (comma-separated): their traffic is not captured.
    #[arg(
        short = 'u',
        long = "proxy-uid",
        default_value = "1337",
        value_delimiter = ','
    )]
    pub proxy_uids: Vec<u32>,
    /// The proxy's gids (comma-separated): their traffic is not captured.
    #[arg(
        short = 'g',
        long = "proxy-gid",
        default_value = "1337",
        value_delimiter = ','
    )]
    pub proxy_gids: Vec<u32>,
    /// Outbound destinations captured: `*` (all) or comma-separated CIDRs.
    #[arg(short = 'i', long = "istio-service-cidr", default_value = "*")]
    pub include_cidrs: String,
    /// Outbound destinations never captured (comma-separated CIDRs).
    #[arg(short = 'x', long = "istio-service-exclude-cidr", default_value = "")]
    pub exclude_cidrs: String,
    /// Inbound ports captured: `*` (all), comma-separated ports, or empty for none.
    #[arg(short = 'b', long = "istio-inbound-ports", default_value = "*")]
    pub include_inbound_ports: String,
    /// Inbound ports never captured (comma-separated).
    #[arg(short = 'd', long = "istio-local-exclude-ports", default_value = "")]
    pub exclude_inbound_ports: String,
    /// Outbound ports never captured (comma-separated).
    #[arg(
        short = 'o',
        long = "istio-local-outbound-ports-exclude",
        default_value = ""
    )]
    pub exclude_outbound_ports: String,
    /// Remove what capture added, and nothing else.
    #[arg(long)]
    pub cleanup: bool,
    /// Print the rules instead of applying them.
    #[arg(long = "dry-run")]
    pub dry_run: bool,
}

/// What capture redirects, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Plan {
    envoy_port: u16,
    inbound_port: u16,
    uids: Vec<u32>,
    gids: Vec<u32>,
    /// `None`: every destination.
    include_v4: Option<Vec<String>>,
    include_v6: Option<Vec<String>>,
    exclude_v4: Vec<String>,
    exclude_v6: Vec<String>,
    /// `None`: every port.
    inbound_ports: Option<Vec<u16>>,
    exclude_inbound: Vec<u16>,
    exclude_outbound: Vec<u16>,
}

fn ports(flag: &str, list: &str) -> anyhow::Result<Vec<u16>> {
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| anyhow::anyhow!("{flag}: {p:?} is not a port"))
        })
        .collect()
}

/// CIDRs split by family; a bare address is a host route.
fn cidrs(flag: &str, list: &str) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for c in list.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let (addr, len) = c.split_once('/').unwrap_or((c, ""));
        let ip: std::net::IpAddr = addr
            .parse()
            .map_err(|_| anyhow::anyhow!("{flag}: {c:?} is not a CIDR"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len: u8 = if len.is_empty() {
            max
        } else {
            len.parse()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| anyhow::anyhow!("{flag}: {c:?} is not a CIDR"))?
        };
        let text = format!("{ip}/{len}");
        if ip.is_ipv4() {
            v4.push(text)
        } else {
            v6.push(text)
        }
    }
    Ok((v4, v6))
}

impl Plan {
    fn new(args: &CaptureArgs) -> anyhow::Result<Self> {
        let (include_v4, include_v6) = if args.include_cidrs.trim() == "*" {
            (None, None)
        } else {
            let (v4, v6) = cidrs("-i", &args.include_cidrs)?;
            (Some(v4), Some(v6))
        };
        let (exclude_v4, exclude_v6) = cidrs("-x", &args.exclude_cidrs)?;
        let inbound_ports = if args.include_inbound_ports.trim() == "*" {
            None
        } else {
            Some(ports("-b", &args.include_inbound_ports)?)
        };
        let mut exclude_inbound = ports("-d", &args.exclude_inbound_ports)?;
        exclude_inbound.extend(PROXY_PORTS);
        exclude_inbound.sort_unstable();
        exclude_inbound.dedup();
        Ok(Self {
            envoy_port: args.envoy_port,
            inbound_port: args.inbound_port,
            uids: args.proxy_uids.clone(),
            gids: args.proxy_gids.clone(),
            include_v4,
            include_v6,
            exclude_v4,
            exclude_v6,
            inbound_ports,
            exclude_inbound,
            exclude_outbound: ports("-o", &args.exclude_outbound_ports)?,
        })
    }

    /// The nftables ruleset: wayfinder's table, replaced whole.
    fn nftables(&self) -> String {
        let set = |items: &[String]| format!("{{ {} }}", items.join(", "));
        let port_set = |ports: &[u16]| set(&ports.iter().map(u16::to_string).collect::<Vec<_>>());
        let ids = |ids: &[u32]| set(&ids.iter().map(u32::to_string).collect::<Vec<_>>());
        let mut r = String::new();
        // Declaring the table first makes the delete succeed on a first run.
        r.push_str(&format!("table inet {TABLE}\ndelete table inet {TABLE}\n"));
        r.push_str(&format!("table inet {TABLE} {{\n"));
        r.push_str(
            "  chain prerouting {\n    type nat hook prerouting priority dstnat; policy accept;\n",
        );
        r.push_str("    meta l4proto tcp jump inbound\n  }\n");
        r.push_str("  chain inbound {\n");
        r.push_str(&format!(
            "    tcp dport {} return\n",
            port_set(&self.exclude_inbound)
        ));
        match &self.inbound_ports {
            None => r.push_str(&format!(
                "    tcp dport != {} redirect to :{}\n",
                self.inbound_port, self.inbound_port
            )),
            Some(p) if !p.is_empty() => r.push_str(&format!(
                "    tcp dport {} redirect to :{}\n",
                port_set(p),
                self.inbound_port
            )),
            Some(_) => {}
        }
        r.push_str("  }\n");
        r.push_str("  chain output {\n    type nat hook output priority -100; policy accept;\n");
        r.push_str("    meta l4proto tcp jump outbound\n  }\n");
        r.push_str("  chain outbound {\n");
        if !self.exclude_outbound.is_empty() {
            r.push_str(&format!(
                "    tcp dport {} return\n",
                port_set(&self.exclude_outbound)
            ));
        }
        // Envoy's inbound passthrough connections come from 127.0.0.6.
        r.push_str("    oifname \"lo\" ip saddr 127.0.0.6 return\n");
        for (key, list) in [("skuid", &self.uids), ("skgid", &self.gids)] {
            if list.is_empty() {
                continue;
            }
            // The proxy calling the workload's own address: through the inbound listener.
            r.push_str(&format!(
                "    oifname \"lo\" ip daddr != 127.0.0.1 meta {key} {} meta l4proto tcp redirect to :{}\n",
                ids(list),
                self.inbound_port
            ));
            r.push_str(&format!(
                "    oifname \"lo\" meta {key} != {} return\n",
                ids(list)
            ));
            r.push_str(&format!("    meta {key} {} return\n", ids(list)));
        }
        r.push_str("    ip daddr 127.0.0.1 return\n    ip6 daddr ::1 return\n");
        if !self.exclude_v4.is_empty() {
            r.push_str(&format!("    ip daddr {} return\n", set(&self.exclude_v4)));
        }
        if !self.exclude_v6.is_empty() {
            r.push_str(&format!("    ip6 daddr {} return\n", set(&self.exclude_v6)));
        }
        let redirect = format!("meta l4proto tcp redirect to :{}", self.envoy_port);
        match (&self.include_v4, &self.include_v6) {
            (None, None) => r.push_str(&format!("    {redirect}\n")),
            (v4, v6) => {
                for (family, list) in [("ip", v4), ("ip6", v6)] {
                    if let Some(list) = list.as_ref().filter(|l| !l.is_empty()) {
                        r.push_str(&format!("    {family} daddr {} {redirect}\n", set(list)));
                    }
                }
            }
        }
        r.push_str("  }\n}\n");
        r
    }
}

/// Which tool applies the rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Nftables,
    Iptables,
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .any(|dir| std::fs::metadata(dir.join(program)).is_ok_and(|m| m.is_file()))
    })
}

fn backend() -> anyhow::Result<Backend> {
    if on_path("nft") {
        Ok(Backend::Nftables)
    } else if on_path("iptables-restore") {
        Ok(Backend::Iptables)
    } else {
        anyhow::bail!(
            "neither nft (nftables) nor iptables-restore (iptables) is on PATH: install one \
             (Debian: apt-get install nftables)"
        )
    }
}

/// Runs `program args` with `input` on stdin; an error names the command and its stderr.
fn pipe(program: &str, args: &[&str], input: &str) -> anyhow::Result<()> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("{program}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| anyhow::anyhow!("{program}: writing the rules: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| anyhow::anyhow!("{program}: {e}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Installs (or with `--cleanup` removes) the capture rules.
pub fn run(args: &CaptureArgs) -> anyhow::Result<()> {
    let plan = Plan::new(args)?;
    let backend = backend();
    if args.dry_run {
        match backend.unwrap_or(Backend::Nftables) {
            Backend::Nftables if args.cleanup => println!("delete table inet {TABLE}"),
            Backend::Nftables => print!("{}", plan.nftables()),
            Backend::Iptables if args.cleanup => print!("{}", iptables_cleanup("iptables-restore")),
            Backend::Iptables => print!("{}", plan.iptables(false)),
        }
        return Ok(());
    }
    match backend? {
        Backend::Nftables => {
            let rules = if args.cleanup {
                format!("table inet {TABLE}\ndelete table inet {TABLE}\n")
            } else {
                plan.nftables()
            };
            pipe("nft", &["-f", "-"], &rules)
        }
        Backend::Iptables => {
            let mut families = vec![("iptables-restore", false)];
            if on_path("ip6tables-restore") && std::path::Path::new("/proc/net/if_inet6").exists() {
                families.push(("ip6tables-restore", true));
            }
            for (program, v6) in families {
                // A second run replaces the chains: clean first, then install.
                pipe(program, &["--noflush"], &iptables_cleanup(program))?;
                if !args.cleanup {
                    pipe(program, &["--noflush"], &plan.iptables(v6))?;
                }
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: CaptureArgs,
    }

    fn plan(args: &[&str]) -> anyhow::Result<Plan> {
        let mut all = vec!["capture"];
        all.extend_from_slice(args);
        Plan::new(&Cli::try_parse_from(all).expect("flags").args)
    }

    #[test]
    fn iptables_rules_are_istio_s_chains() {
        let p = plan(&[
            "-u",
            "1337",
            "-i",
            "10.96.0.0/12,fd00::/8",
            "-b",
            "8080,9090",
        ])
        .unwrap();
        let v4 = p.iptables(false);
        for line in [
            ":ISTIO_OUTPUT - [0:0]",
            "-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001",
            "-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006",
            "-A ISTIO_INBOUND -p tcp --dport 8080 -j ISTIO_IN_REDIRECT",
            "-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN",
            "-A ISTIO_OUTPUT -d 10.96.0.0/12 -j ISTIO_REDIRECT",
            "-A OUTPUT -p tcp -j ISTIO_OUTPUT",
        ] {
            assert!(v4.lines().any(|l| l == line), "{line} in\n{v4}");
        }
        assert!(
            !v4.contains("fd00::/8"),
            "IPv6 ranges only in the IPv6 rules"
        );
        assert!(
            p.iptables(true)
                .contains("-A ISTIO_OUTPUT -d fd00::/8 -j ISTIO_REDIRECT")
        );
    }

    #[test]
    fn bad_flags_are_refused_with_the_flag() {
        let err = plan(&["-x", "10.0.0.0/33"]).unwrap_err().to_string();
        assert_eq!(err, "-x: \"10.0.0.0/33\" is not a CIDR");
        let err = plan(&["-o", "http"]).unwrap_err().to_string();
        assert_eq!(err, "-o: \"http\" is not a port");
        let rules = plan(&["-b", ""]).unwrap().nftables();
        let inbound = rules.split("chain inbound {").nth(1).unwrap();
        // The chain ends at its closing brace, indented as chains are.
        let inbound = inbound.split("\n  }").next().unwrap();
        assert!(inbound.contains("return"), "{inbound}");
        assert!(
            !inbound.contains("redirect"),
            "`-b ''` captures no inbound port: {inbound}"
        );
        let all = plan(&[]).unwrap().nftables();
        let inbound = all.split("chain inbound {").nth(1).unwrap();
        let inbound = inbound.split("\n  }").next().unwrap();
        assert!(inbound.contains("redirect to :15006"), "{inbound}");
    }
}
